"""Per-frame cost of the Xiaozhi audio path: Opus, binary framing, resampling.

Run: .venv/bin/python bench/bench_codec.py [--frames 2000]

Every operation handles one 60 ms frame per call. Each call is timed on its own with
perf_counter_ns (wall) and process_time_ns (CPU of this process); the table shows
median and 95th percentile in microseconds, and the share of the 60 ms real-time
budget the median takes. The input is a deterministic voice-like signal: a gliding
harmonic tone with syllable-rate loudness changes over a little noise.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vixio.transports.xiaozhi.protocol.codec import (
    DOWNLINK_SAMPLE_RATE,
    FRAME_DURATION_MS,
    UPLINK_SAMPLE_RATE,
    OpusDecoder,
    OpusEncoder,
    Resampler,
)
from vixio.transports.xiaozhi.protocol.framing import pack, unpack

WARMUP_CALLS = 100
FRAME_BUDGET_US = FRAME_DURATION_MS * 1000


@dataclass(slots=True)
class Timing:
    """Per-call timings of one operation, in microseconds."""

    name: str
    wall_us: list[float]
    cpu_us: list[float]


def voice_like_frames(rate: int, count: int, seed: int = 7) -> list[bytes]:
    """Return `count` frames of int16 PCM, 60 ms each, at `rate` Hz."""
    frame = rate * FRAME_DURATION_MS // 1000
    t = np.arange(frame * count) / rate
    pitch = 140 + 60 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    noise = np.random.default_rng(seed).normal(0, 0.02, t.size)
    signal = np.clip(0.25 * tone * envelope + noise, -1, 1)
    pcm = (signal * 32767).astype("<i2").tobytes()
    size = frame * 2
    return [pcm[i * size : (i + 1) * size] for i in range(count)]


def measure(name: str, call: Callable[[bytes], object], inputs: Sequence[bytes]) -> Timing:
    """Time `call` once per input after a warm-up on the first inputs.

    The warm-up replays those inputs later, which stateful codecs accept: an Opus
    decoder or a resampler just sees a discontinuity in the audio.
    """
    for item in inputs[:WARMUP_CALLS]:
        call(item)
    wall: list[float] = []
    cpu: list[float] = []
    for item in inputs:
        wall_start, cpu_start = time.perf_counter_ns(), time.process_time_ns()
        call(item)
        cpu_end, wall_end = time.process_time_ns(), time.perf_counter_ns()
        wall.append((wall_end - wall_start) / 1000)
        cpu.append((cpu_end - cpu_start) / 1000)
    return Timing(name, wall, cpu)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def run(frames: int) -> list[Timing]:
    uplink_pcm = voice_like_frames(UPLINK_SAMPLE_RATE, frames)
    uplink_encoder = OpusEncoder(sample_rate=UPLINK_SAMPLE_RATE)
    uplink_packets = [uplink_encoder.encode(frame) for frame in uplink_pcm]
    v1_messages = [pack(packet, 1) for packet in uplink_packets]
    v3_messages = [pack(packet, 3) for packet in uplink_packets]

    uplink_decoder = OpusDecoder(sample_rate=UPLINK_SAMPLE_RATE)
    downlink_encoder = OpusEncoder(sample_rate=DOWNLINK_SAMPLE_RATE)
    resampler = Resampler(22050, DOWNLINK_SAMPLE_RATE)

    return [
        measure("uplink decode 16 kHz", uplink_decoder.decode, uplink_packets),
        measure("unpack v1", lambda data: unpack(data, 1), v1_messages),
        measure("unpack v3", lambda data: unpack(data, 3), v3_messages),
        measure("pack v3", lambda payload: pack(payload, 3), uplink_packets),
        measure("downlink encode 24 kHz", downlink_encoder.encode, voice_like_frames(DOWNLINK_SAMPLE_RATE, frames)),
        measure("resample 22050->24000", resampler.process, voice_like_frames(22050, frames)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000, help="60 ms frames per operation (default 2000)")
    args = parser.parse_args()
    if args.frames <= WARMUP_CALLS:
        parser.error(f"--frames must exceed the {WARMUP_CALLS} warm-up calls")

    print(f"{args.frames} frames of {FRAME_DURATION_MS} ms per operation; times in µs per frame")
    header = f"{'operation':<24}{'wall med':>10}{'wall p95':>10}{'cpu med':>10}{'cpu p95':>10}{'% of 60ms':>11}"
    print(header)
    print("-" * len(header))
    for timing in run(args.frames):
        wall_median = statistics.median(timing.wall_us)
        print(
            f"{timing.name:<24}{wall_median:>10.1f}{p95(timing.wall_us):>10.1f}"
            f"{statistics.median(timing.cpu_us):>10.1f}{p95(timing.cpu_us):>10.1f}"
            f"{100 * wall_median / FRAME_BUDGET_US:>10.2f}%"
        )


if __name__ == "__main__":
    main()
