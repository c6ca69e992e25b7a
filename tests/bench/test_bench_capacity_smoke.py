"""bench/bench_capacity.py must keep working: its metrics, its clips, and one tiny run end to end.

The end-to-end run is the real thing at N=2, one turn: fakes process, `vixio serve` process,
load generator process, real Opus and Silero VAD. It asserts what the benchmark promises to
measure, with bounds generous enough for a loaded 2-core machine.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from capacity.fakes import PROVIDER_PAIRS, InstantSpeechServices, speech_like_pcm  # noqa: E402
from capacity.floor import measure_floor  # noqa: E402
from capacity.load import FRAME_S, build_clips, burst_slots, playback_end  # noqa: E402
from capacity.procs import HostCpu  # noqa: E402
from capacity.report import late_frames  # noqa: E402
from capacity.server import server_config, shipped_voice_stack  # noqa: E402

pytestmark = pytest.mark.process

TTS_FRAMES = round(1.5 / FRAME_S)
"""The fake TTS answers 1.5 s of audio per sentence and the fake LLM one sentence: 25 frames."""


def test_frames_on_time_are_not_late() -> None:
    # The server sends 5 frames at once, then one per 60 ms: all early or on time.
    frames = [0.0] * 5 + [0.06 * k for k in range(1, 21)]
    assert late_frames(frames) == 0
    assert playback_end(frames) == pytest.approx(25 * 0.06)


def test_a_frame_after_the_playhead_is_late_and_playback_resumes_from_it() -> None:
    frames = [0.0, 0.06, 0.30, 0.36, 0.42]  # the third frame was due at 0.12
    assert late_frames(frames) == 1
    assert playback_end(frames) == pytest.approx(0.30 + 3 * 0.06)


def test_clips_end_their_speech_where_the_question_section_ends() -> None:
    clips = build_clips()
    assert len(clips) >= 2
    for clip in clips:
        assert len(clip.packets) == 60  # 0.3 + 1.8 + 1.5 s
        assert clip.last_speech == 34  # the last frame of the 1.8 s section
        assert all(0 < len(packet) < 400 for packet in clip.packets)
    assert len(speech_like_pcm(1.5)) == 1.5 * 24000 * 2


def test_the_room_level_sets_the_noise_around_each_question() -> None:
    import math

    from vixio.transports.xiaozhi.protocol.codec import OpusDecoder

    def lead_dbfs(noise_dbfs: float | None) -> float:
        clip, decoder = build_clips(noise_dbfs)[0], OpusDecoder(16000, 1)
        pcm = b"".join(decoder.decode(packet) for packet in clip.packets[:5])  # 0.3 s of the room
        samples = [int.from_bytes(pcm[i : i + 2], "little", signed=True) for i in range(0, len(pcm), 2)]
        return 20 * math.log10(math.sqrt(sum(x * x for x in samples) / len(samples)) / 32768)

    default, quiet = lead_dbfs(None), lead_dbfs(-70)
    assert -60 < default < -52  # above the VAD's quiet level: scored
    assert -75 < quiet < -66  # a quiet room: below it


def test_set_options_become_nested_config_overrides() -> None:
    from bench_capacity import config_settings

    assert config_settings(["vad.quiet_below_dbfs=null", "pipeline.prewarm=false", "vad.min_silence_ms=400"]) == {
        "vad": {"quiet_below_dbfs": None, "min_silence_ms": 400},
        "pipeline": {"prewarm": False},
    }
    for bad in (["vad.threshold"], ["=1"], ["vad..x=1"], ["vad=1", "vad.threshold=0.5"]):
        with pytest.raises(ValueError, match="--set"):
            config_settings(bad)


def test_burst_slots_end_every_sentence_within_the_window() -> None:
    burst = {"window": 2.0, "period": 8.0, "lead": 3.0}
    slots = [burst_slots(i, 100, 3, 100.0, burst) for i in range(100)]
    for turn in range(3):
        starts = [device[turn] for device in slots]
        assert min(starts) == pytest.approx(103.0 + 8.0 * turn)
        assert max(starts) - min(starts) < 2.0  # same clip layout: the speech ends within 2 s too
    assert len({round(device[0], 6) for device in slots}) == 100  # spread, not all at one instant


async def test_the_slow_provider_pair_answers_after_its_delays() -> None:
    aiohttp = pytest.importorskip("aiohttp")
    first_token, first_audio = PROVIDER_PAIRS["slow"]
    services = InstantSpeechServices(first_token_delay=first_token, first_audio_delay=first_audio)
    await services.start()
    try:
        async with aiohttp.ClientSession() as http:
            started = time.monotonic()
            async with http.post(
                services.base_url + "/chat/completions",
                json={"model": "bench", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            ) as response:
                assert (await response.content.readline()).startswith(b"data: ")
                token_after = time.monotonic() - started
            started = time.monotonic()
            async with http.post(services.base_url + "/audio/speech", json={"input": "Hello."}) as response:
                assert await response.content.read(2)
                audio_after = time.monotonic() - started
    finally:
        await services.stop()
    assert first_token <= token_after < first_token + 2.0
    assert first_audio <= audio_after < first_audio + 2.0


async def test_the_fake_transcription_reads_the_upload_and_wants_a_file_part() -> None:
    aiohttp = pytest.importorskip("aiohttp")
    services = InstantSpeechServices()
    await services.start()
    try:
        async with aiohttp.ClientSession() as http:
            upload = aiohttp.FormData()
            upload.add_field("model", "whisper-1")
            upload.add_field("file", speech_like_pcm(2.0, 16000), filename="turn.wav", content_type="audio/wav")
            async with http.post(services.base_url + "/audio/transcriptions", data=upload) as response:
                assert response.status == 200
                assert (await response.json())["text"] == services.question
            async with http.post(services.base_url + "/audio/transcriptions", data={"model": "whisper-1"}) as response:
                assert response.status == 400  # an urlencoded form: not multipart at all
            no_file = aiohttp.FormData()
            no_file.add_field("model", "whisper-1")
            no_file.add_field("file", "not a file")  # a plain field, no filename
            async with http.post(services.base_url + "/audio/transcriptions", data=no_file) as response:
                assert response.status == 400
    finally:
        await services.stop()
    assert services.stats["transcriptions"] == 1
    assert services.stats["rejected"] == 2


def test_the_server_keeps_its_state_in_the_benchmarks_folder(tmp_path: Path) -> None:
    on = server_config(1, 2, "http://127.0.0.1:3/v1", "INFO", tmp_path / "state.db")
    off = server_config(1, 2, "http://127.0.0.1:3/v1", "INFO", tmp_path / "state.db", memory=False)
    assert on["state"]["path"] == str(tmp_path / "state.db")
    assert on["memory"]["enabled"] is True and off["memory"]["enabled"] is False


def test_the_offline_providers_are_the_shipped_voice_stack_whole(tmp_path: Path) -> None:
    import yaml

    from vixio.config.models import VixioConfig

    shipped = yaml.safe_load((ROOT / "config.yaml").read_text())
    config = server_config(1, 2, "http://127.0.0.1:3/v1", "INFO", tmp_path / "state.db", voice=shipped_voice_stack())
    for section in ("vad", "asr", "agent", "tts"):
        assert config[section] == shipped[section]  # replaced whole: no fake's api_base left behind
    assert config["state"]["path"] == str(tmp_path / "state.db")  # the rest is the benchmark's
    parsed = VixioConfig.model_validate(config)
    assert (parsed.asr.provider, parsed.agent.provider, parsed.tts.provider) == (
        "faster-whisper",
        "local-llama",
        "piper",
    )


def test_the_floor_is_opus_decode_plus_silero_per_frame() -> None:
    floor = measure_floor(build_clips()[:1], repeats=1)
    assert 0 < floor["opus_decode_ms"] < floor["ms_per_frame"] < 20
    assert floor["ms_per_frame"] == pytest.approx(floor["opus_decode_ms"] + floor["silero_ms"], abs=1e-3)


def test_the_floor_probe_measures_while_the_load_runs_and_keeps_its_window() -> None:
    import time

    from capacity.floor import FloorProbe

    started = time.monotonic()
    with FloorProbe(interval=0.3) as probe:
        time.sleep(2.5)
    ended = time.monotonic()
    times = [at for at, _ in probe.readings]
    assert len(times) >= 3 and times == sorted(times) and started < times[0] and times[-1] < ended
    solo = measure_floor(build_clips()[:1], repeats=1)["ms_per_frame"]
    for _, ms in probe.readings:  # the same work as the floor before the load (same machine, minutes apart)
        assert solo / 4 < ms < solo * 4
    assert probe.during(started, ended)["probes"] == len(times)
    assert probe.during(times[1], times[1])["probes"] == 1  # only the probes inside the window count
    assert probe.during(ended, ended + 1) is None


def test_host_cpu_shares_are_of_the_time_between_two_readings() -> None:
    before, after = HostCpu(busy_s=10.0, steal_s=1.0, total_s=100.0), HostCpu(busy_s=40.0, steal_s=6.0, total_s=200.0)
    assert after.since(before) == {"busy_pct": 30.0, "steal_pct": 5.0}
    assert before.since(before) == {"busy_pct": 0.0, "steal_pct": 0.0}  # no time passed: nothing to divide
    now = HostCpu.now()  # this machine's /proc/stat: every share within its total
    assert 0 <= now.steal_s <= now.total_s and 0 < now.busy_s < now.total_s


def test_two_devices_one_turn_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_capacity.py"),
            "--n",
            "2",
            "--turns",
            "1",
            "--stagger",
            "0.5",
            "--burst-period",
            "5",
            "--memory",
            "off",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "N=2" in run.stdout and "latency" in run.stdout and "x the floor of" in run.stdout
    assert "| burst | off | zero | 2 |" in run.stdout and "| staggered | off | zero | 2 |" in run.stdout
    summaries = json.loads(out.read_text())
    assert [s["shape"] for s in summaries] == ["staggered", "burst"]  # both shapes by default
    for summary in summaries:
        assert summary["turns"] == {"total": 2, "failed": 0, "reasons": {}, "started_late": 0}
        # The latency includes at least the VAD's early silence (vad.early_silence_ms, 150 ms): a
        # transcript that ends a sentence is confirmed then, others at the 500 ms end of turn.
        assert 150 < summary["latency_ms"]["p50"] < 10_000
        assert summary["downlink"]["frames"] == 2 * TTS_FRAMES
        assert summary["generator"]["frames_sent"] == 2 * 60
        assert summary["generator"]["stray_frames"] == 0
        assert 0 < summary["server"]["cpu_ms_per_session_frame"] < 100
        assert summary["server"]["cpu_per_frame_vs_floor"] == pytest.approx(
            summary["server"]["cpu_ms_per_session_frame"] / summary["floor"]["ms_per_frame"]
        )
        during = summary["floor_during"]  # probed once a second while the devices talked
        assert during["probes"] >= 1 and during["min"] <= during["ms_per_frame"] <= during["max"]
        assert summary["server"]["cpu_per_frame_vs_floor_during"] == pytest.approx(
            summary["server"]["cpu_ms_per_session_frame"] / during["ms_per_frame"]
        )
        assert summary["machine"]["cpu"] and summary["memory"] == "off"
        # The servers run on the benchmark's own interpreter, whose build moves their CPU too.
        assert summary["machine"]["python"] == f"CPython {platform.python_version()} ({sys.base_prefix})"
        # The devices, the fakes and the server were busy during the load; steal is whatever the host had.
        assert 0 < summary["machine"]["busy_pct"] <= 100 and 0 <= summary["machine"]["steal_pct"] <= 100
        assert summary["server"]["cpu_ms_per_frame_by_thread"]["event loop"] > 0  # the workers' loops
        marks = summary["server_marks_ms"]
        assert 0 <= marks["asr_final"]["p50"] <= marks["llm_first_token"]["p50"] <= marks["first_frame_sent"]["p50"]
        assert summary["server"]["rss_idle_mb"] > 50
        assert summary["server_log"]["errors"] == 0


def test_the_generator_measures_a_known_answer_delay() -> None:
    """Against an answering machine that answers 600 ms after the question's last packet, the
    benchmark must read about 600 ms, every frame on time, nothing failed."""
    run = subprocess.run(
        [sys.executable, str(BENCH / "capacity" / "selfcheck.py"), "--n", "3", "--turns", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(line for line in run.stdout.splitlines() if "latency" in line)
    p50 = float(line.split("p50 ")[1].split(" ms")[0])
    assert 595 <= p50 < 1500, line  # loopback and a busy machine add a little, never subtract
    assert "late frames 0 of 75" in run.stdout
    assert "failed   0 of 3" in run.stdout
