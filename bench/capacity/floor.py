"""The in-run floor of bench/bench_capacity.py: what one 60 ms uplink frame must cost at least.

Every listening session has to decode its device's Opus packet and run Silero VAD over the
audio, whatever else the server does. The floor is that work alone, on one thread, one frame at
a time, in the benchmark's own process, measured right before each load (so the figure beside
it was taken on the same machine in the same state): the clips' packets (the devices' real
uplink: noise and speech) are decoded with vixio's `OpusDecoder` and scored, 512-sample windows,
by the `silero-onnx` provider's model as the server loads it (`SileroOnnxStream.probability`:
one window per inference, no batching). CPU time of the thread (`time.thread_time`), so a busy
machine lengthens it only through shared caches, not through waiting for a core.

The server's CPU per session per frame divided by this floor says how much it spends beyond
the unavoidable: routing, turn logic, the reply's TTS, Opus encode and sending, the model calls.

The floor is measured hot: frames back to back on one thread. A server meets each frame after its
core has idled for a while (at one device, the 60 ms between frames). On the 2-core EPYC the same
two Silero inferences cost 0.13 ms of thread CPU back to back and 0.66 ms after each 60 ms sleep
(measured in process; glibc's memory return ruled out). That cold start is most of why one device
reads 7–9 × the floor. It is also part of why 100 devices read higher than 200: the busier server
idles less.

The host's own speed changes under the benchmark: on the 2-core EPYC VM, 5 of 16 floors measured
on an idle machine, a second apart, read 0.26–0.33 ms instead of 0.19–0.21 (Opus and Silero alike
~1.4 × slower, whole 150 ms measurements at a time; two floors on the two cores at once do not slow
each other, so it is another guest's load on the same physical cores). A floor taken before a load
can then be in one state and the load in the other. So `FloorProbe` also measures the floor while
the load runs, from its own process: every `PROBE_INTERVAL` s, `PROBE_FRAMES` frames hot (~8 ms
of CPU, under 1 % of a core), and the report divides the server's CPU by the median of those too.
"""

from __future__ import annotations

import json
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":  # the probe, run as a script: the `capacity` package's parent on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

from capacity.load import Clip  # noqa: E402

PROBE_INTERVAL = 1.0
"""Seconds between the floor probes taken while a load runs (`FloorProbe`)."""
PROBE_FRAMES = 40
"""Frames timed per probe (~8 ms of CPU), after `PROBE_WARMUP` untimed ones: the floor is hot."""
PROBE_WARMUP = 10

FLOOR_REPEATS = 5
"""Passes over the clips; the median pass is the floor (one pass is ~150 frames)."""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def python_build() -> str:
    """The interpreter that runs the servers (they are started with this one): its build moves the
    server's CPU as well as the host does. Most of a served frame's and turn's CPU is Python, and
    the floor is C, so the ratio to the floor carries it. On the 2-core EPYC, Debian's python3.11
    (profile-guided, link-time optimised) took 6–10 % less server CPU per listening frame (the
    event loops 10–12 %) than pyenv's default build (README)."""
    return f"{platform.python_implementation()} {platform.python_version()} ({sys.base_prefix})"


READY = "probe ready"


class FloorProbe:
    """The floor measured while a load runs, in a child process (`python capacity.floor.py --probe`):
    use as a context manager around the load; `readings` holds (monotonic time, ms per frame)."""

    def __init__(self, interval: float = PROBE_INTERVAL) -> None:
        self.interval = interval
        self.readings: list[tuple[float, float]] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> FloorProbe:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--probe", str(self.interval)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent,
        )
        # The load starts once the probe measures: its own start (imports, the model, the clips:
        # seconds on a busy machine) must neither compete with the load nor leave a short run unprobed.
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != READY:
            self._proc.kill()
            raise RuntimeError(f"the floor probe did not start (exit {self._proc.wait()})")
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        for line in out.splitlines():
            try:
                reading = json.loads(line)
            except ValueError:  # a line cut short as the probe was stopped
                continue
            if not isinstance(reading, dict) or "at" not in reading:
                continue
            self.readings.append((reading["at"], reading["ms_per_frame"]))

    def during(self, start: float, end: float) -> dict[str, Any] | None:
        """The probes taken between `start` and `end` (monotonic): median, min, max, count."""
        inside = [ms for at, ms in self.readings if start <= at <= end]
        if not inside:
            return None
        return {
            "ms_per_frame": round(statistics.median(inside), 4),
            "min": round(min(inside), 4),
            "max": round(max(inside), 4),
            "probes": len(inside),
        }


def _probe(interval: float) -> None:
    """The probe process: one reading per line on stdout until SIGTERM."""
    from capacity.load import build_clips
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    clips = build_clips()
    packets = [packet for clip in clips for packet in clip.packets]
    meter = _Meter(SileroOnnxVAD(16000))
    position = 0
    print(READY, flush=True)
    while True:
        time.sleep(interval)
        for _ in range(PROBE_WARMUP):
            meter.score(meter.decode(packets[position % len(packets)]))
            position += 1
        started = time.thread_time()
        for _ in range(PROBE_FRAMES):
            meter.score(meter.decode(packets[position % len(packets)]))
            position += 1
        spent = time.thread_time() - started
        print(json.dumps({"at": time.monotonic(), "ms_per_frame": round(1000 * spent / PROBE_FRAMES, 4)}), flush=True)


class _Meter:
    """The floor's work on one stream of frames: Opus decode, then Silero VAD over whole 512-sample
    windows (the rest waits for the next frame), by the `silero-onnx` model as the server loads it."""

    def __init__(self, vad: Any) -> None:
        from vixio.transports.xiaozhi.protocol.codec import OpusDecoder

        self._window = vad.window_samples
        self._decoder = OpusDecoder(16000, 1)
        self._stream = vad.create_stream()
        self._pending = np.zeros(0, dtype=np.float32)

    def decode(self, packet: bytes) -> bytes:
        return self._decoder.decode(packet)

    def score(self, pcm: bytes) -> None:
        pending = np.concatenate([self._pending, np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0])
        whole = len(pending) // self._window * self._window
        for start in range(0, whole, self._window):
            self._stream.probability(pending[start : start + self._window])
        self._pending = pending[whole:]


def measure_floor(clips: list[Clip], repeats: int = FLOOR_REPEATS) -> dict[str, Any]:
    """CPU ms per 60 ms frame of Opus decode + Silero VAD, single-threaded; see the module doc."""
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD

    vad = SileroOnnxVAD(16000)
    decode_ms, vad_ms = [], []
    for _ in range(repeats):
        decode_s = vad_s = 0.0
        frames = 0
        for clip in clips:
            meter = _Meter(vad)  # each clip its own decoder and VAD stream, as each device has
            for packet in clip.packets:
                t0 = time.thread_time()
                pcm = meter.decode(packet)
                t1 = time.thread_time()
                meter.score(pcm)
                t2 = time.thread_time()
                decode_s += t1 - t0
                vad_s += t2 - t1
                frames += 1
        decode_ms.append(1000 * decode_s / frames)
        vad_ms.append(1000 * vad_s / frames)
    decode, vad_frame = statistics.median(decode_ms), statistics.median(vad_ms)
    return {
        "ms_per_frame": round(decode + vad_frame, 4),
        "opus_decode_ms": round(decode, 4),
        "silero_ms": round(vad_frame, 4),
        "rebuilt_graph": vad._model.rebuilt,
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        _probe(float(sys.argv[2]))
