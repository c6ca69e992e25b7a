"""SessionEchoCanceller: one device's microphone with the echo of its own reply removed.

WebRTC's AEC3 (the `pywebrtc-audio` binding, vixio[aec]) does the cancelling. It was chosen by
measurement (docs/barge-in.md, bench/bench_aec_candidates.py) over speex's canceller (`pyaec`)
and livekit's AEC3 build: on the benchmark's echo path (small-speaker clipping, a 0.3 s room,
120 ms wandering delay) AEC3 removed 15–20 dB where speex removed 9–10, at ~0.10 ms of CPU per
10 ms (speex 0.18–0.21); livekit's AEC3 build reached 25–33 dB at the same cost but is a 12 MB
wheel with protobuf/aiofiles beside it, for one class.

AEC3 finds small delays itself, but its filters need the reference to lead the echo by a
bounded amount; the timestamps and `DelayEstimator` (alignment.py) line the reference up to
within `LEAD_MS` of the echo first. Double-talk is AEC3's: its adaptive filter freezes on
microphone energy the reference does not explain, and its suppressor keeps what it cannot
attribute to the echo, so the user's voice passes (bench: −2 dB on the user's speech while the
reply plays).

Everything here is CPU work for a worker thread (`aec_worker`): never call `process` on the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vixio.core.batching import BatchWorker
from vixio.transports.xiaozhi.aec.alignment import RATE, DelayEstimator, DownlinkReference, UplinkClock

LEAD_MS = 30
"""The reference is fed this much ahead of the estimated echo: inside AEC3's own delay search,
and margin for the ±20 ms the device's delay wanders. Measured over 20 benchmark replies: 8 ms
left 7 false pauses, 100 ms 10, 30 ms 3 (all on a session's first reply, while AEC3 converges)."""
TAIL_S = 1.0
"""After the last reply audio the canceller keeps running this long (the room's echo tail and
the device's queue); after that the microphone passes untouched and costs nothing."""


def _webrtc() -> type:
    try:
        from pywebrtc_audio import EchoCanceller
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("server-side echo cancellation needs the aec extra: pip install 'vixio[aec]'") from exc
    return EchoCanceller


@dataclass(slots=True)
class EchoStats:
    """What the console and metrics show for one session."""

    frames: int = 0
    """Uplink frames that went through the canceller (reply audio playing or just played)."""
    mic_energy: float = 0.0
    out_energy: float = 0.0
    delay_ms: float | None = None

    @property
    def erle_db(self) -> float | None:
        """Echo return loss enhancement while the reply played, in dB; the user's own speech
        over the reply counts as residual, so this is a lower bound."""
        if self.frames == 0 or self.out_energy <= 0:
            return None
        return round(10 * np.log10(max(self.mic_energy, 1.0) / self.out_energy), 1)


class SessionEchoCanceller:
    """Per session: `sent` records the downlink, `process` cleans the uplink (worker thread)."""

    def __init__(self, *, reference_seconds: float = 4.0, max_delay_ms: float = 400.0) -> None:
        self.reference = DownlinkReference(reference_seconds)
        self.clock = UplinkClock()
        self.estimator = DelayEstimator(max_ms=max_delay_ms)
        self.stats = EchoStats()
        self._aec = _webrtc()(RATE, 1, 0)
        self._uplink = 0  # uplink samples seen
        self._mic_ring = np.zeros(self.estimator.window, dtype=np.int16)
        self._last_active = -10 * RATE  # uplink sample of the last frame with reply audio

    def sent(self, timestamp_ms: int, pcm16k: np.ndarray) -> None:
        """A downlink frame was stamped `timestamp_ms` and sent (its audio resampled to 16 kHz).
        Call in send order; cheap (a copy into the ring)."""
        self.reference.add(timestamp_ms, pcm16k)

    def process(self, pcm: bytes, timestamp_ms: int) -> bytes:
        """One uplink frame (int16 16 kHz mono) with its v2 timestamp → the frame without echo."""
        mic = np.frombuffer(pcm, dtype="<i2")
        start, n = self._uplink, len(mic)
        self._uplink += n
        self._remember(mic)
        if timestamp_ms:
            at = self.reference.where(timestamp_ms)
            if at is not None:
                self.clock.observe(start, at)
                self._last_active = start
        if self.clock.offset is None or start - self._last_active > TAIL_S * RATE:
            return pcm  # no reply playing: nothing to cancel
        base = start + self.clock.offset
        if self.estimator.due(n):
            self._estimate(base + n)
        delay = self.estimator.delay if self.estimator.delay is not None else 0
        far = self.reference.read(base - delay + LEAD_MS * RATE // 1000, n)
        out = self._aec.process(mic, far)
        self._account(mic, out, delay)
        return out.astype("<i2", copy=False).tobytes()

    def _remember(self, mic: np.ndarray) -> None:
        keep = len(self._mic_ring)
        self._mic_ring = np.concatenate([self._mic_ring, mic])[-keep:]

    def _estimate(self, end_base: int) -> None:
        """Run the estimator over the last `window` of microphone audio ending at clock `end_base`."""
        est = self.estimator
        window = len(self._mic_ring)
        first = end_base - window
        ref = self.reference.read(first - est.max_lag, window + est.max_lag - est.min_lag)
        active = np.abs(ref[est.max_lag - est.min_lag:].reshape(-1, 160)).max(axis=1) >= 64
        if active.mean() < 0.5:
            return  # the reply is mostly silence here: too little to correlate
        est.update(self._mic_ring, ref)

    def _account(self, mic: np.ndarray, out: np.ndarray, delay: int) -> None:
        s = self.stats
        s.frames += 1
        s.mic_energy += float(np.square(mic, dtype=np.float64).sum())
        s.out_energy += float(np.square(out, dtype=np.float64).sum())
        s.delay_ms = delay * 1000 / RATE


def cancel_batch(jobs: Sequence[tuple[SessionEchoCanceller, bytes, int]]) -> list[bytes | BaseException]:
    """BatchWorker body: each job is (canceller, frame, timestamp); jobs run in order."""
    out: list[bytes | BaseException] = []
    for canceller, pcm, stamp in jobs:
        try:
            out.append(canceller.process(pcm, stamp))
        except Exception as exc:  # noqa: BLE001 - one session's bad frame must not fail the others
            out.append(exc)
    return out


_AEC_WORKER: BatchWorker[tuple[SessionEchoCanceller, bytes, int], bytes] | None = None


def aec_worker() -> BatchWorker[tuple[SessionEchoCanceller, bytes, int], bytes]:
    """One thread per process for every session's echo cancelling (AEC3 releases the GIL)."""
    global _AEC_WORKER
    if _AEC_WORKER is None:
        _AEC_WORKER = BatchWorker(cancel_batch, name="aec")
    return _AEC_WORKER


def available() -> bool:
    """Whether the aec extra is installed."""
    try:
        _webrtc()
    except ImportError:
        return False
    return True
