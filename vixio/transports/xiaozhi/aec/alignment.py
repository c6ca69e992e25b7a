"""Which downlink audio each uplink frame heard: the reference ring and the delay estimator.

The firmware built with `CONFIG_USE_SERVER_AEC` records the v2 timestamp of each downlink frame
as it finishes writing it to the speaker, and stamps each microphone frame it encodes next with
the oldest recorded one (`AudioService::PushTaskToEncodeQueue`; at most 3 queued, 0 when none).
So an uplink frame stamped T was captured while the frame the server stamped T was playing:
it fixes the two streams to within a frame. What is left, the I2S/DMA buffers and the air
(40–250 ms, wandering by a few ms as the playback queue fills and drains), is found by
`DelayEstimator` from the signals themselves.

- `DownlinkReference`: the 16 kHz PCM the server sent, on the server's downlink sample clock,
  with the clock position of every timestamp; bounded (`seconds` of audio, `MAX_STAMPS` stamps),
  whatever the device sends.
- `UplinkClock`: maps uplink samples to that clock. Each stamped frame gives one offset
  (downlink position − uplink position); the median of the last few follows the device's
  jitter without jumping at a single late or early stamp.
- `DelayEstimator`: GCC-PHAT between the microphone and the reference at 4 kHz (speech's echo
  energy is below 2 kHz; a quarter of the samples makes a 1.5 s estimate cost ~0.3 ms), re-run
  every 0.5 s of reply, switching to a new delay only when two estimates in a row agree, so
  the user's voice (double-talk) or one noisy window cannot move it. A new reply's stamps may
  place it a whole frame off the last one (which frame is the oldest queued depends on where
  the speaker's and microphone's frames fall); `reacquire` then takes the first estimate, from
  a 0.6 s window, that is the delay in force or one frame either side of it.
"""

from __future__ import annotations

import statistics
from collections import deque

import numpy as np

RATE = 16000
MAX_STAMPS = 256
"""Timestamps remembered (~15 s of 60 ms frames): the ring holds less audio than that anyway."""


class DownlinkReference:
    """The reply PCM (int16, 16 kHz) as sent, on a sample clock that advances only while
    audio is sent; `stamp(ms)` says where a frame stamped `ms` began."""

    def __init__(self, seconds: float = 4.0) -> None:
        self._ring = np.zeros(int(seconds * RATE), dtype=np.int16)
        self.position = 0
        """Samples sent so far: the clock."""
        self._stamps: dict[int, int] = {}
        self._order: deque[int] = deque()

    def add(self, timestamp_ms: int, pcm: np.ndarray) -> None:
        """One downlink frame's audio, stamped `timestamp_ms` (as sent in its v2 header)."""
        if timestamp_ms in self._stamps:
            del self._stamps[timestamp_ms]  # a wrapped clock reuses a stamp: the newest wins
        self._stamps[timestamp_ms] = self.position
        self._order.append(timestamp_ms)
        while len(self._order) > MAX_STAMPS:
            old = self._order.popleft()
            if self._stamps.get(old, -1) < self.position - len(self._ring):
                self._stamps.pop(old, None)
        size = len(self._ring)
        pcm = pcm[-size:]
        start = self.position % size
        first = min(len(pcm), size - start)
        self._ring[start : start + first] = pcm[:first]
        self._ring[: len(pcm) - first] = pcm[first:]
        self.position += len(pcm)

    def where(self, timestamp_ms: int) -> int | None:
        """Clock position of the frame stamped `timestamp_ms`, None if unknown or too old."""
        at = self._stamps.get(timestamp_ms)
        if at is None or at < self.position - len(self._ring):
            return None
        return at

    def read(self, start: int, n: int) -> np.ndarray:
        """Samples [start, start + n) of the clock; silence where nothing was sent or kept."""
        out = np.zeros(n, dtype=np.int16)
        size = len(self._ring)
        lo, hi = max(start, self.position - size, 0), min(start + n, self.position)
        if lo < hi:  # at most two slices of the ring (hi - lo <= size): no index array per frame
            a, b = lo % size, (hi - 1) % size + 1
            if a < b:
                out[lo - start : hi - start] = self._ring[a:b]
            else:
                out[lo - start : lo - start + size - a] = self._ring[a:]
                out[lo - start + size - a : hi - start] = self._ring[:b]
        return out


class UplinkClock:
    """Uplink sample index → downlink clock position, from the frames' timestamps."""

    def __init__(self, history: int = 9, new_reply: int = 3 * 960) -> None:
        self._offsets: deque[int] = deque(maxlen=history)
        self._new_reply = new_reply
        self.offset: int | None = None
        self.restarts = 0
        """New replies seen after the first: each one's stamps may place it a whole frame off the last."""

    def observe(self, uplink_start: int, downlink_position: int) -> None:
        """A frame starting at uplink sample `uplink_start` was stamped with the frame that
        starts at `downlink_position`. An offset far from the current one is a new reply (the
        downlink clock stood still between replies while the uplink ran on): history restarts."""
        offset = downlink_position - uplink_start
        if self.offset is not None and abs(offset - self.offset) > self._new_reply:
            self._offsets.clear()
            self.restarts += 1
        self._offsets.append(offset)
        self.offset = int(statistics.median(self._offsets))

    def reset(self) -> None:
        self._offsets.clear()
        self.offset = None


class DelayEstimator:
    """Echo delay in samples (microphone lags the timestamp-aligned reference by it)."""

    DECIMATE = 4
    REACQUIRE_WINDOW = int(0.6 * RATE)
    """A new reply's first estimates use 0.6 s: the delay is only chosen among whole-frame shifts."""

    def __init__(
        self,
        *,
        min_ms: float = -80.0,
        max_ms: float = 400.0,
        window_s: float = 1.5,
        every_s: float = 0.5,
        agree_ms: float = 6.0,
        min_confidence: float = 4.0,
    ) -> None:
        self.min_lag = int(min_ms * RATE / 1000)
        self.max_lag = int(max_ms * RATE / 1000)
        self.window = int(window_s * RATE)
        self.every = int(every_s * RATE)
        self.agree = int(agree_ms * RATE / 1000)
        self.min_confidence = min_confidence
        self.delay: int | None = None
        """The delay in force, in 16 kHz samples; None until the first confident estimate."""
        self.estimates = 0
        self._candidate: int | None = None
        self._since = 0
        self._step: int | None = None  # while reacquiring after a new reply: the frame length

    @property
    def reacquiring(self) -> bool:
        return self._step is not None

    @property
    def current_window(self) -> int:
        """Microphone samples the next estimate should use: a short window while reacquiring."""
        return self.window if self._step is None else min(self.window, self.REACQUIRE_WINDOW)

    def reacquire(self, frame: int) -> None:
        """A new reply began: its stamps fix it to the uplink only to within whole frames (the
        firmware stamps with the oldest queued frame, and how many are queued depends on where
        the speaker's and microphone's frames fall), while the device's own delay is unchanged.
        So the next estimate that lands on the delay in force plus or minus whole `frame`s is
        taken at once, from a short window, without waiting for a second one to agree."""
        if self.delay is not None:
            self._step, self._since = frame, 0

    def due(self, samples: int) -> bool:
        """Count `samples` more of reply audio; True when a new estimate is due (every
        `every_s`, or every quarter of that until two estimates agreed on a first delay)."""
        self._since += samples
        if self._since >= (self.every if self.delay is not None and self._step is None else self.every // 4):
            self._since = 0
            return True
        return False

    def update(self, mic: np.ndarray, ref: np.ndarray) -> int | None:
        """Estimate from `mic` and `ref` (equal lengths, ref aligned by timestamps and starting
        `max_lag` samples before mic's first sample, i.e. len(ref) = len(mic) + max_lag - min_lag);
        returns the delay in force afterwards."""
        lag, confidence = gcc_phat(mic, ref, self.max_lag - self.min_lag, self.DECIMATE)
        if confidence < self.min_confidence:
            return self.delay
        self.estimates += 1
        delay = self.max_lag - lag  # lag counts from ref's start, which leads mic by max_lag
        if self._step is not None and self.delay is not None:
            shifts = [self.delay + k * self._step for k in (-1, 0, 1)]
            if min(abs(delay - s) for s in shifts) <= self.agree:
                self.delay, self._candidate, self._step = delay, None, None
                return self.delay
        if self.delay is not None and abs(delay - self.delay) <= self.agree:
            self.delay = (self.delay + delay) // 2
            self._candidate = None
        elif self._candidate is not None and abs(delay - self._candidate) <= self.agree:
            self.delay, self._candidate = delay, None
        else:
            self._candidate = delay
        return self.delay


def _decimate(x: np.ndarray, factor: int) -> np.ndarray:
    """Average-then-pick: a crude low-pass that is enough for locating a correlation peak."""
    whole = len(x) // factor * factor
    return x[:whole].astype(np.float32).reshape(-1, factor).mean(axis=1)


def gcc_phat(mic: np.ndarray, ref: np.ndarray, span: int, decimate: int = 4) -> tuple[int, float]:
    """The shift s in [0, span] (16 kHz samples) for which mic[i] best matches ref[i + s], and
    the peak's height over the median of the correlation (a confidence; ~1-3 for no echo)."""
    m, r = _decimate(mic, decimate), _decimate(ref, decimate)
    n = 1 << int(np.ceil(np.log2(len(m) + len(r))))
    spec = np.fft.rfft(r, n) * np.conj(np.fft.rfft(m, n))
    spec /= np.abs(spec) + 1e-9
    corr = np.fft.irfft(spec, n)
    short = span // decimate
    window = np.abs(corr[: short + 1])
    best = int(window.argmax())
    confidence = float(window[best] / (np.median(window) + 1e-12))
    return best * decimate, confidence
