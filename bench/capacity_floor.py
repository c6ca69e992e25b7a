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
"""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from capacity_load import Clip

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


def measure_floor(clips: list[Clip], repeats: int = FLOOR_REPEATS) -> dict[str, Any]:
    """CPU ms per 60 ms frame of Opus decode + Silero VAD, single-threaded; see the module doc."""
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD
    from vixio.transports.xiaozhi.codec import OpusDecoder

    vad = SileroOnnxVAD(16000)
    window = vad.window_samples
    decode_ms, vad_ms = [], []
    for _ in range(repeats):
        decode_s = vad_s = 0.0
        frames = 0
        for clip in clips:
            decoder = OpusDecoder(16000, 1)
            stream = vad.create_stream()
            pending = np.zeros(0, dtype=np.float32)
            for packet in clip.packets:
                t0 = time.thread_time()
                pcm = decoder.decode(packet)
                t1 = time.thread_time()
                pending = np.concatenate([pending, np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0])
                whole = len(pending) // window * window
                for start in range(0, whole, window):
                    stream.probability(pending[start:start + window])
                pending = pending[whole:]
                t2 = time.thread_time()
                decode_s += t1 - t0
                vad_s += t2 - t1
                frames += 1
        decode_ms.append(1000 * decode_s / frames)
        vad_ms.append(1000 * vad_s / frames)
    decode, vad_frame = statistics.median(decode_ms), statistics.median(vad_ms)
    return {"ms_per_frame": round(decode + vad_frame, 4), "opus_decode_ms": round(decode, 4),
            "silero_ms": round(vad_frame, 4), "rebuilt_graph": vad._model.rebuilt}
