"""Which echo canceller: ERLE and CPU of the pip-only candidates on the barge-in benchmark's echo path.

Run: .venv/bin/python bench/bench_aec_candidates.py [--seconds 43]

The reply is the Piper zh fixtures back to back (twice: ~43 s) played through
`vixio.testing.echo_path.EchoPath` (small speaker, room, 120 ms wandering delay, −12 dB, noise);
each canceller gets the microphone and the reply 10 ms at a time, once with the reply as sent (it
must find the 120 ms itself) and once delayed by 100 ms, leaving 20 ms to find (as the
timestamps and the delay estimator leave it). ERLE over the whole run and over its second half (converged); CPU per 10 ms frame, thread
time, beside the CPU model. Candidates not installed are listed and skipped:

- `pywebrtc-audio` (vixio[aec]): WebRTC AEC3, `EchoCanceller`;
- `livekit`: livekit's AEC3 build, `rtc.AudioProcessingModule` (pip install livekit);
- `pyaec`: speex's canceller, 200 ms filter (pip install pyaec).
"""

from __future__ import annotations

import argparse
import sys
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vixio.testing.echo_path import EchoPath, erle_db

Process = Callable[[np.ndarray, np.ndarray], np.ndarray]
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speech_zh"
FRAME = 160


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def webrtc() -> Process:
    from pywebrtc_audio import EchoCanceller

    ec = EchoCanceller(16000, 1, 0)
    return lambda mic, far: ec.process(mic, far)


def livekit() -> Process:
    from livekit import rtc

    apm = rtc.AudioProcessingModule(echo_cancellation=True)

    def process(mic: np.ndarray, far: np.ndarray) -> np.ndarray:
        apm.process_reverse_stream(rtc.AudioFrame(far.tobytes(), 16000, 1, FRAME))
        frame = rtc.AudioFrame(mic.tobytes(), 16000, 1, FRAME)
        apm.process_stream(frame)
        return np.frombuffer(frame.data, dtype=np.int16).copy()

    return process


def speex() -> Process:
    from pyaec import Aec

    aec = Aec(FRAME, 200 * 16, 16000, True)
    return lambda mic, far: np.asarray(aec.cancel_echo(mic, far), dtype=np.int16)


CANDIDATES: dict[str, Callable[[], Process]] = {
    "pywebrtc-audio (AEC3)": webrtc,
    "livekit (AEC3)": livekit,
    "pyaec (speex)": speex,
}


def reply(seconds: float) -> np.ndarray:
    clips = []
    for path in sorted(FIXTURES.glob("*.wav")):
        with wave.open(str(path)) as w:
            clips.append(np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"))
    audio = np.concatenate(clips)
    return np.tile(audio, int(np.ceil(seconds * 16000 / len(audio))))[: int(seconds * 16000)]


def measure(make: Callable[[], Process], far: np.ndarray, shift_ms: int) -> tuple[float, float, float]:
    mic = EchoPath(seed=3, delay_ms=120).mic(far)
    ref = np.concatenate([np.zeros(shift_ms * 16, np.int16), far])[: len(far)]
    process = make()
    out = np.zeros_like(mic)
    cpu = 0.0
    frames = len(mic) // FRAME
    for k in range(frames):
        piece = slice(k * FRAME, (k + 1) * FRAME)
        t0 = time.thread_time()
        out[piece] = process(mic[piece], ref[piece])
        cpu += time.thread_time() - t0
    half = len(mic) // 2
    return erle_db(mic, out), erle_db(mic[half:], out[half:]), 1000 * cpu / frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=43.0)
    args = parser.parse_args()
    far = reply(args.seconds)
    print(f"CPU: {cpu_model()}; reply {len(far) / 16000:.1f} s")
    print(
        "| canceller | ERLE, reply as sent (all / 2nd half) | ERLE, reply 100 ms later (20 ms left) | CPU per 10 ms |"
    )
    print("|---|---|---|---|")
    for name, make in CANDIDATES.items():
        try:
            make()
        except ImportError as exc:
            print(f"| {name} | not installed ({exc.name}) | | |")
            continue
        sent = measure(make, far, 0)
        aligned = measure(make, far, 100)
        print(
            f"| {name} | {sent[0]:.1f} / {sent[1]:.1f} dB | {aligned[0]:.1f} / {aligned[1]:.1f} dB | "
            f"{(sent[2] + aligned[2]) / 2:.3f} ms |"
        )


if __name__ == "__main__":
    main()
