"""SessionEchoCanceller: one device's microphone with the echo of its own reply removed.

WebRTC's AEC3 (the `pywebrtc-audio` binding, vixio[aec]) does the cancelling. It was chosen by
measurement (docs/barge-in.md, bench/bench_aec_candidates.py) over speex's canceller (`pyaec`)
and livekit's AEC3 build: on the benchmark's echo path (small-speaker clipping, a 0.3 s room,
120 ms wandering delay) AEC3 removed 15–20 dB where speex removed 9–10, at ~0.10 ms of CPU per
10 ms (speex 0.18–0.21); livekit's AEC3 build reached 25–33 dB at the same cost but is a 12 MB
wheel with protobuf/aiofiles beside it, for one class.

AEC3 finds small delays itself, but its filters need the reference to lead the echo by a
bounded amount; the timestamps and `DelayEstimator` (alignment.py) line the reference up to
within `LEAD_MS` of the echo first. How the alignment is held (measured, docs/barge-in.md):

- Between moves it stays put: AEC3 follows the device's ±20 ms wander itself (fed a constant
  alignment it removed 22–40 dB on every benchmark board), and each shift of the reference
  under its converged filter costs it echo.
- A move of more than `MOVE_MS` (the session's first delay estimate, a re-estimate) starts a
  fresh AEC3 beside the old one (`_switch`): an AEC3 whose filter was adapted to the old
  alignment often never re-found the echo within the reply (ERLE 2–5 dB on 5 of 6 sessions'
  first replies; those replies paused and cancelled themselves).
- A new reply's stamps place it within a frame either way of the last reply (the firmware
  stamps with the oldest queued frame, and how many are queued depends on where the speaker's
  and the microphone's frames fall). Until the estimator has picked the shift, the reference is
  fed a frame further ahead, so it leads the echo whichever it is: this took echo-only replies
  that paused from 13 in 60 to 2 (every remaining false pause had come 1.3–2 s into a reply,
  when a misaligned start was corrected).

Double-talk is AEC3's: its adaptive filter freezes on microphone energy the reference does not
explain and its suppressor keeps what it cannot attribute to the echo; it does not always (the
benchmark saw a user's 70–80 dB come out at 22–30 dB for a whole question: a missed barge-in).

Everything here is CPU work for a worker thread (`aec_worker`): never call `process` on the loop.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vixio.core.batching import BatchWorker
from vixio.transports.xiaozhi.aec.alignment import RATE, DelayEstimator, DownlinkReference, UplinkClock
from vixio.transports.xiaozhi.aec.doubletalk import DoubleTalk

LEAD_MS = 30
"""The reference is fed this much ahead of the estimated echo: inside AEC3's own delay search,
and margin for the ±20 ms the device's delay wanders. Measured over 20 benchmark replies: 8 ms
left 7 false pauses, 100 ms 10, 30 ms 3 (all on a session's first reply, while AEC3 converges)."""
MOVE_MS = 30
"""An alignment change larger than this starts a fresh AEC3 (`_switch`); smaller ones are the
device's wander, which AEC3 follows itself."""
SWITCH_S = 1.5
"""How long the old and the fresh AEC3 run side by side after a move (twice the CPU meanwhile)."""
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

    def __init__(
        self, *, reference_seconds: float = 4.0, max_delay_ms: float = 400.0, doubletalk: bool = False
    ) -> None:
        self.reference = DownlinkReference(reference_seconds)
        self.clock = UplinkClock()
        self.estimator = DelayEstimator(max_ms=max_delay_ms)
        self.stats = EchoStats()
        self.lane = next(_LANES)
        """Which canceller thread serves this session (`aec_worker`)."""
        self._aec = _webrtc()(RATE, 1, 0)
        self._uplink = 0  # uplink samples seen
        self._mic = np.zeros(2 * self.estimator.window, dtype=np.int16)  # the last `window` end at `_mic_end`
        self._mic_end = self.estimator.window
        self._last_active = -10 * RATE  # uplink sample of the last frame with reply audio
        self._align: int | None = None  # reference position minus uplink position, as `_aec` is fed
        self._fresh: Any | None = None  # a new AEC3 on a new alignment, while it converges
        self._fresh_left = 0
        self._fresh_align = 0
        self.doubletalk = DoubleTalk() if doubletalk else None
        """The per-band double-talk detector and gentler suppressor after AEC3 (doubletalk.py;
        `xiaozhi.server_aec_double_talk`, off by default: docs/barge-in.md)."""
        self._idle = True

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
                restarts = self.clock.restarts
                self.clock.observe(start, at)
                if self.clock.restarts != restarts:
                    self.estimator.reacquire(n)
                self._last_active = start
        if self.clock.offset is None or start - self._last_active > TAIL_S * RATE:
            if self.doubletalk is not None and not self._idle:
                self.doubletalk.reset()
            self._idle = True
            return pcm  # no reply playing: nothing to cancel
        self._idle = False
        base = start + self.clock.offset
        if self.estimator.due(n):
            self._estimate(base + n)
        delay = self.estimator.delay if self.estimator.delay is not None else 0
        out = self._cancel(mic, start, self.clock.offset - delay)
        self._account(mic, out, delay)
        return out.astype("<i2", copy=False).tobytes()

    def _cancel(self, mic: np.ndarray, start: int, align: int) -> np.ndarray:
        """AEC3 on `mic` (uplink sample `start`), the echo being at reference position
        `start + align` by the stamps and the estimator."""
        n, lead = len(mic), LEAD_MS * RATE // 1000
        if self._align is None:
            self._align = align
        if self.estimator.reacquiring:
            self._align = align + n  # a new reply, shift not yet known: lead by a frame more
        elif abs(align - (self._align if self._fresh is None else self._fresh_align)) > MOVE_MS * RATE // 1000:
            self._switch(align)
        elif self._fresh is not None:
            self._fresh_align = align
        ref = self.reference.read(start + self._align + lead, n)
        out = self._aec.process(mic, ref)
        if self._fresh is not None:
            fresh = self._fresh.process(mic, self.reference.read(start + self._fresh_align + lead, n))
            if np.square(fresh, dtype=np.float64).sum() < np.square(out, dtype=np.float64).sum():
                out = fresh
            self._fresh_left -= n
            if self._fresh_left <= 0:
                self._aec, self._fresh, self._align = self._fresh, None, self._fresh_align
        if self.doubletalk is not None and self.doubletalk.fits(n):
            armed = self.estimator.delay is not None and not self.estimator.reacquiring
            out = self.doubletalk.process(mic, ref, out, armed)
        elif self.doubletalk is not None:
            self.doubletalk.reset()
        return out

    def _switch(self, align: int) -> None:
        """The alignment moved: a fresh AEC3 starts on the new one and runs beside the old for
        `SWITCH_S`, each frame going out from whichever leaves less (the user's voice is in both,
        so the lower one is the one that removed more echo); then the fresh one takes over."""
        if self._fresh is None:
            self._fresh = _webrtc()(RATE, 1, 0)
        else:  # moved again while converging: the converging one restarts on the newest alignment
            self._fresh.reset()
        self._fresh_left = int(SWITCH_S * RATE)
        self._fresh_align = align

    def _remember(self, mic: np.ndarray) -> None:
        """Append to the microphone history; it is moved back only when full (once per `window`)."""
        keep = self.estimator.window
        mic = mic[-keep:]
        if self._mic_end + len(mic) > len(self._mic):
            self._mic[:keep] = self._mic[self._mic_end - keep : self._mic_end]
            self._mic_end = keep
        self._mic[self._mic_end : self._mic_end + len(mic)] = mic
        self._mic_end += len(mic)

    def _recent(self, n: int) -> np.ndarray:
        """The last `n` (at most the estimator's window) microphone samples."""
        return self._mic[self._mic_end - n : self._mic_end]

    def _estimate(self, end_base: int) -> None:
        """Run the estimator over the last `window` of microphone audio ending at clock `end_base`."""
        est = self.estimator
        window = est.current_window
        first = end_base - window
        ref = self.reference.read(first - est.max_lag, window + est.max_lag - est.min_lag)
        active = np.abs(ref[est.max_lag - est.min_lag :][: window // 160 * 160].reshape(-1, 160)).max(axis=1) >= 64
        if active.mean() < 0.5:
            return  # the reply is mostly silence here: too little to correlate
        est.update(self._recent(window), ref)

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


AEC_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Canceller threads per process: one per core, at most 4. The canceller costs ~0.75 ms of CPU per
60 ms frame, so one thread is saturated at ~80–100 boards playing at once and every AEC session's
uplink waits behind it (bench/bench_aec_load.py, 100 boards, 2-core EPYC: frames waited 67 / 124 ms
p50 / p95 on one thread idle, 170 / 364 under load; 43 / 94 on two). AEC3 releases the GIL."""
_AEC_WORKERS: list[BatchWorker[tuple[SessionEchoCanceller, bytes, int], bytes]] = []
_LANES = itertools.count()


def aec_worker(canceller: SessionEchoCanceller) -> BatchWorker[tuple[SessionEchoCanceller, bytes, int], bytes]:
    """The canceller thread this session's frames go to: always the same one (its frames stay in
    order), sessions spread over `AEC_THREADS` round-robin as they start."""
    if not _AEC_WORKERS:
        _AEC_WORKERS.extend(BatchWorker(cancel_batch, name="aec") for _ in range(AEC_THREADS))
    return _AEC_WORKERS[canceller.lane % len(_AEC_WORKERS)]


def available() -> bool:
    """Whether the aec extra is installed."""
    try:
        _webrtc()
    except ImportError:
        return False
    return True
