"""Server-side echo cancelling at scale: N boards with `features.aec` all playing a reply at once.

Run: .venv/bin/python bench/bench_aec_load.py [--devices 100] [--seconds 20]

What `bench_barge_in.py` cannot show: its canceller runs on the audio's clock, one frame after
another. Here N boards (default 100) each hear their own reply through their own echo path
(`vixio.testing.echo_path`, the barge-in benchmark's: small speaker, room, 40–250 ms wandering
delay) and send a 60 ms frame every 60 ms in real time, each at its own phase, stamped as the
firmware stamps; an asyncio loop hands every frame to the process's canceller threads
(`aec_worker`, as `session/connection.py` does) and waits for it, and the downlink side records
each reply frame the server "sent" (`SessionEchoCanceller.sent`). Two passes over the same frames:
the loop alone (frames passed on untouched), then through the cancellers; the difference of the
process's CPU time, per frame, is what cancelling adds. Printed beside it: the CPU model, the
in-run floor (Opus decode + Silero VAD per 60 ms frame, measured in the same run), how long a
frame waited for its canceller (p50 / p95 / max: a thread that cannot keep up shows here first),
and the ERLE over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # bench/: its `capacity` package

from bench.bench_barge_in import cpu_model
from capacity.floor import measure_floor
from capacity.load import Clip
from vixio.testing.barge_in import FRAME, LEAD_S, Voices
from vixio.testing.echo_path import RATE, EchoPath, device_stamps


class Board:
    """One device: its reply, what its microphone hears, its stamps and its canceller."""

    def __init__(self, index: int, voices: Voices, seconds: float) -> None:
        from vixio.transports.xiaozhi.aec.canceller import SessionEchoCanceller

        rng = np.random.default_rng(index)
        frames = int(seconds * RATE) // FRAME
        reply = np.concatenate([voices.replies[int(i)] for i in rng.integers(0, len(voices.replies), 12)])
        p0 = int(LEAD_S * RATE) // FRAME * FRAME
        reply = reply[: frames * FRAME - p0]
        reply = reply[: len(reply) // FRAME * FRAME]
        played = np.zeros(frames * FRAME, np.int16)
        played[p0 : p0 + len(reply)] = reply
        path = EchoPath(seed=index, delay_ms=float(rng.uniform(40, 250)))
        self.mic = path.mic(played)
        self.reply = reply
        stamp0 = 1 + 60 * 1000 * index
        self.played_at = [(p0 + j * FRAME + 80, stamp0 + 60 * j) for j in range(len(reply) // FRAME)]
        self.stamps = device_stamps(self.played_at, frames, FRAME, phase=int(rng.integers(0, FRAME)))
        self.frames = frames
        self.phase_s = float(rng.uniform(0, FRAME / RATE))
        self.canceller = SessionEchoCanceller()
        self.sent = 0
        self.out: list[np.ndarray] = []
        self.waits: list[float] = []

    def send_due(self, k: int) -> None:
        """The server sent each reply frame ~5 frames before the board played it (pre-buffer)."""
        while self.sent < len(self.played_at) and self.played_at[self.sent][0] <= (k + 6) * FRAME:
            s = self.sent
            self.canceller.sent(self.played_at[s][1], self.reply[s * FRAME : (s + 1) * FRAME])
            self.sent += 1


async def drive(boards: list[Board], cancel: bool) -> None:
    from vixio.transports.xiaozhi.aec.canceller import aec_worker

    start = time.perf_counter() + 0.2

    async def one(board: Board) -> None:
        for k in range(board.frames):
            due = start + board.phase_s + (k + 1) * FRAME / RATE
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            pcm = board.mic[k * FRAME : (k + 1) * FRAME].tobytes()
            if cancel:
                board.send_due(k)
                t0 = time.perf_counter()
                pcm = await aec_worker(board.canceller).submit((board.canceller, pcm, board.stamps[k]))
                board.waits.append(time.perf_counter() - t0)
                board.out.append(np.frombuffer(pcm, dtype="<i2"))

    await asyncio.gather(*(one(b) for b in boards))


def floor_ms(voices: Voices, frames: int = 400) -> float:
    """Opus decode + Silero VAD per 60 ms frame, one stream, thread CPU time: bench_capacity's
    floor (capacity/floor.py) over the replies' first `frames` frames, as the boards send them."""
    from vixio.transports.xiaozhi.protocol.codec import OpusEncoder

    audio = np.concatenate(voices.replies)
    enc = OpusEncoder(RATE, frame_duration_ms=60, complexity=0)
    count = min(frames, len(audio) // FRAME)
    packets = [enc.encode(audio[i * FRAME : (i + 1) * FRAME].tobytes()) for i in range(count)]
    return float(measure_floor([Clip("replies", packets, count - 1)])["ms_per_frame"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=None, help="canceller threads (default: canceller.AEC_THREADS)")
    args = parser.parse_args()
    from vixio.transports.xiaozhi.aec import canceller

    if args.threads:
        canceller.AEC_THREADS = args.threads
    voices = Voices.from_fixtures()
    boards = [Board(i, voices, args.seconds) for i in range(args.devices)]
    frames = sum(b.frames for b in boards)
    floor_before = floor_ms(voices)
    load = os.getloadavg()[0]
    cpu0 = time.process_time()
    asyncio.run(drive(boards, cancel=False))
    cpu_loop = time.process_time() - cpu0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(drive(boards, cancel=True))
    cpu_aec, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    floor_after = floor_ms(voices)
    waits = sorted(w for b in boards for w in b.waits)
    worked = sum(b.canceller.stats.frames for b in boards)
    skip = int(2.0 * RATE)  # from 2 s on: after convergence, as bench_barge_in's ERLE
    erles = []
    for b in boards:
        mic = b.mic[skip : len(b.out) * FRAME].astype(np.float64)
        out = np.concatenate(b.out)[skip:].astype(np.float64)
        live = slice(0, len(b.reply) - skip)  # audio from 2 s (1.4 s into the reply) to 0.6 s before its end
        erles.append(10 * np.log10(np.square(mic[live]).sum() / max(np.square(out[live]).sum(), 1.0)))
    added = 1000 * (cpu_aec - cpu_loop) / frames
    print(
        f"CPU: {cpu_model()}; {args.devices} boards × {args.seconds:g} s, every board playing a reply; {canceller.AEC_THREADS} canceller thread(s); load average {load:.1f}"
    )
    print("| measured | value |")
    print("|---|---|")
    print(f"| CPU added per 60 ms uplink frame (all frames; {worked / frames:.0%} had reply audio) | {added:.3f} ms |")
    print(
        f"| in-run floor: Opus decode + Silero VAD per frame (before / after) | {floor_before:.3f} / {floor_after:.3f} ms |"
    )
    print(f"| added ÷ floor | {added / floor_before:.2f} |")
    print(f"| cores the cancelling takes at this load | {(cpu_aec - cpu_loop) / wall:.2f} |")
    print(
        f"| frame waited for its canceller p50 / p95 / max | {1000 * statistics.median(waits):.1f} / "
        f"{1000 * waits[int(0.95 * len(waits))]:.1f} / {1000 * waits[-1]:.1f} ms |"
    )
    print(
        f"| ERLE from 2 s, median / p10 over boards | {statistics.median(erles):.1f} / {np.percentile(erles, 10):.1f} dB |"
    )


if __name__ == "__main__":
    main()
