"""DoubleTalk: a per-band double-talk detector beside AEC3, and a gentler suppressor for it.

AEC3's non-linear suppressor dims a user who speaks about as loud as the echo by ~11 dB, and
Silero then never starts (docs/barge-in.md, "Why barge-ins are missed"). A linear echo estimate
cannot tell double-talk on the benchmark's echo path (its ±20 ms delay wander moves the echo
under a sample-exact filter), so this one works on smoothed band powers instead:

- the microphone, AEC3's output and the reference AEC3 was fed go through a 20 ms / 10 ms STFT;
- the reference's band powers are held at their maximum over the last `SPAN_HOPS` hops (the lead
  it is fed plus the wander) and decay after at the room's tail (`DECAY_DB` per hop);
- a per-band echo gain (mic over held reference, log domain) is learned only on hops AEC3
  itself says were echo (its output `LEARN_DB` under the microphone, the reference playing);
- a hop is near-end speech when at least `THETA` of the speech bands (300–3400 Hz) are `K_DB`
  over the predicted echo (that envelope) and over the noise floor, or `THETA_KEPT` of them where
  AEC3 left more than −`KEPT_DB` of the hop; `RUN` such hops in a row start double-talk, which
  holds `HOLD` hops after the last; nothing is detected until the canceller has placed the echo;
- during double-talk each bin goes out as the louder of AEC3's output and the microphone under
  a Wiener-like gain max(`G_MIN`, 1 − `BETA`·echo/mic), echo being the typical (mean log) gain
  times the held reference; otherwise AEC3's output, unchanged but for the STFT's 10 ms delay.

Measured (docs/barge-in.md, "A per-band double-talk detector"): at the issue's size it cut the
missed barge-ins from 22 to 8 of 200 but raised the echo-only replies that paused from 16 to 26
(those cancelled 7 to 8), so it is an option, off by default (`xiaozhi.server_aec_double_talk`);
about 0.2 ms of CPU per 60 ms frame.
"""

from __future__ import annotations

import numpy as np

RATE = 16000
WIN, HOP = 320, 160
"""20 ms windows, 10 ms hops: six hops per 60 ms uplink frame."""
MAX_HOPS = 12
"""The longest frame taken (120 ms); `fits` says which frames can go through."""
BANDS = 24
LOW_HZ, HIGH_HZ = 150.0, 7000.0
SPEECH_HZ = (300.0, 3400.0)
SPAN_HOPS = 16
"""Reference hops the echo of one may fall behind: the 30 ms lead AEC3 is fed, ±20–30 ms wander,
and the extra frame of lead while a new reply is placed."""
DECAY_DB = 2.0
"""The held reference's decay per hop: −60 dB in 0.3 s, the simulated room's tail."""
LEARN_DB = 15.0
K_DB = 6.0
THETA = 0.4
THETA_KEPT = 0.15
KEPT_DB = 15.0
RUN = 2
HOLD = 20
BETA = 1.0
G_MIN = 0.15
ALPHA_UP, ALPHA_DOWN = 0.3, 0.01
"""EMA weights in the log echo gain, rising (per frame, toward its highest echo hop) and falling
(per echo hop): an upper envelope of the echo over the held reference, not its mean."""
ALPHA_MEAN = 0.02
"""EMA weight of one echo hop in the typical (mean log) echo gain the suppressor subtracts."""
NOISE_RISE_DB = 0.05
"""The noise floor's rise per hop (it falls at once to a quieter frame's mean)."""
NOISE_DB = 10.0
"""How far over the noise floor a band must be to count as near-end speech."""
REF_ACTIVE = 30.0**2
"""Reference power (mean square) under which it is silence: nothing to learn from."""


_LEARN, _K, _NOISE = 10 ** (-LEARN_DB / 10), 10 ** (K_DB / 10), 10 ** (NOISE_DB / 10)


def _edges() -> np.ndarray:
    freqs = np.fft.rfftfreq(WIN, 1 / RATE)
    edges = np.geomspace(LOW_HZ, HIGH_HZ, BANDS + 1)
    band = np.clip(np.searchsorted(edges, freqs, side="right") - 1, 0, BANDS - 1)
    return band


class DoubleTalk:
    """One session's detector and suppressor; `process` runs after AEC3 on each frame."""

    def __init__(self) -> None:
        self._window = np.sqrt(np.hanning(WIN + 1)[:WIN])  # periodic sqrt-Hann: analysis and synthesis
        self._scale = 2.0 / (WIN * float(np.square(self._window).sum()))
        self._band = _edges()
        self._matrix = np.zeros((len(self._band), BANDS))
        self._matrix[np.arange(len(self._band)), self._band] = 1.0
        centres = np.geomspace(LOW_HZ, HIGH_HZ, BANDS + 1)
        mid = np.sqrt(centres[:-1] * centres[1:])
        self._speech = (mid >= SPEECH_HZ[0]) & (mid <= SPEECH_HZ[1])
        self._rise = 10 ** (NOISE_RISE_DB / 10 * np.arange(MAX_HOPS + 1))
        self._decay = (10 ** (-DECAY_DB / 10)) ** np.arange(MAX_HOPS + 1)
        lag = np.arange(MAX_HOPS)[:, None] - np.arange(MAX_HOPS)[None, :]
        self._weights = np.where(lag >= 0, self._decay[np.maximum(lag, 0)], 0.0)  # held_i from span_j, j ≤ i
        self.reset()
        self.hops = 0
        self.doubletalk_hops = 0

    @staticmethod
    def fits(samples: int) -> bool:
        """Whether a frame of this many samples can go through `process` (whole hops, at most
        `MAX_HOPS`); the canceller hands others on from AEC3 alone and resets this."""
        return 0 < samples <= MAX_HOPS * HOP and samples % HOP == 0

    def reset(self) -> None:
        """A fresh start (the canceller went idle: no reply playing)."""
        self._tail = np.zeros((3, HOP))  # mic, AEC3's output, reference
        self._ola = np.zeros(HOP)
        self._ref_hist = np.zeros((SPAN_HOPS, BANDS))
        self._held = np.zeros(BANDS)
        self._log_gain = np.zeros(BANDS)  # 0 dB: the echo as loud as the reference until learned
        self._log_mean = np.zeros(BANDS)
        self._noise = np.full(BANDS, np.inf)
        self._run = 0
        self._hold = 0

    def _stft(self, signals: np.ndarray) -> np.ndarray:
        """(k, n) signals → (k, hops, bins) spectra, each continuing from its last frame's tail."""
        joined = np.concatenate([self._tail, signals], axis=1)
        self._tail = joined[:, -HOP:]
        hops = signals.shape[1] // HOP
        row, item = joined.strides
        frames = np.lib.stride_tricks.as_strided(joined, (3, hops, WIN), (row, HOP * item, item))
        return np.fft.rfft(frames * self._window, axis=2)

    def process(self, mic: np.ndarray, ref: np.ndarray, out: np.ndarray, armed: bool = True) -> np.ndarray:
        """`mic` (int16), the reference slice AEC3 was fed and AEC3's output → the frame handed
        on (int16, same length, 10 ms behind). Not `armed` (the echo's delay not yet known), it
        learns but never detects."""
        spectra = self._stft(np.stack([mic, out, ref]).astype(np.float64))
        spec_mic, spec_out = spectra[0], spectra[1]
        m, o, r = (spectra.real**2 + spectra.imag**2) * self._scale @ self._matrix
        held = self._hold_reference(r)
        n = len(m)
        self._noise = np.minimum(self._noise * self._rise[n], m.mean(axis=0))
        floor = np.maximum(self._noise, 1.0)
        tiny = 1e-3
        mic_sum = m.sum(axis=1)
        echo_hop = (o.sum(axis=1) <= mic_sum * _LEARN) & (held.sum(axis=1) > REF_ACTIVE) & (mic_sum > 10 * floor.sum())
        count = int(echo_hop.sum())
        if count:
            # the frame's highest ratio per band, where the reference was there to be echoed
            ratio = np.log(m[echo_hop] + tiny) - np.log(held[echo_hop] + tiny)
            ratio = np.where(held[echo_hop] > 0.1, ratio, -np.inf).max(axis=0)
            ok = np.isfinite(ratio)
            step = ratio[ok] - self._log_gain[ok]
            self._log_gain[ok] += np.where(step > 0, ALPHA_UP, min(1.0, ALPHA_DOWN * count)) * step
            typical = np.log(m[echo_hop] + tiny).mean(axis=0) - np.log(held[echo_hop] + tiny).mean(axis=0)
            self._log_mean[ok] += min(1.0, ALPHA_MEAN * count) * (typical[ok] - self._log_mean[ok])
        echo = np.exp(self._log_gain) * held
        near = (m > _K * echo) & (m > _NOISE * floor)
        share = near[:, self._speech].mean(axis=1)
        # weaker band evidence counts where AEC3 itself left much of the hop (it keeps some of a user)
        kept = o.sum(axis=1) >= mic_sum * 10 ** (-KEPT_DB / 10)
        evidence = ((share >= THETA) | ((share >= THETA_KEPT) & kept)) & armed
        flags = np.zeros(n, dtype=bool)
        for i, hit in enumerate(evidence):  # six hops: the run and hold are sequential
            self._run = self._run + 1 if hit else 0
            if self._run >= RUN:
                self._hold = HOLD
            flags[i] = self._hold > 0
            self._hold = max(self._hold - 1, 0)
        self.hops += n
        self.doubletalk_hops += int(flags.sum())
        spec = spec_out
        if flags.any():
            typical = np.exp(self._log_mean) * held  # the echo's typical level, not its envelope
            gain = np.maximum(G_MIN, 1.0 - BETA * typical / np.maximum(m, tiny))[:, self._band]
            gentle = spec_mic * gain
            louder = np.abs(gentle) > np.abs(spec_out)
            spec = np.where(flags[:, None] & louder, gentle, spec_out)
        return self._synthesise(spec, len(mic))

    def _hold_reference(self, r: np.ndarray) -> np.ndarray:
        """Per hop: the max of the last `SPAN_HOPS` hops, decaying at the room's tail after."""
        n = len(r)
        joined = np.concatenate([self._ref_hist, r])
        step = joined.strides
        span = np.lib.stride_tricks.as_strided(joined, (n, SPAN_HOPS + 1, BANDS), (step[0], step[0], step[1]))
        span = span.max(axis=1)
        self._ref_hist = joined[-SPAN_HOPS:]
        # held_i = max(span_i, held_{i-1}·d) = max over j ≤ i of span_j·d^(i−j), and the carry
        weights = self._weights[:n, :n]
        held = np.maximum(
            (weights[:, :, None] * span[None, :, :]).max(axis=1), self._held * self._decay[1 : n + 1, None]
        )
        self._held = held[-1]
        return held

    def _synthesise(self, spec: np.ndarray, n: int) -> np.ndarray:
        frames = np.fft.irfft(spec, n=WIN, axis=1) * self._window
        blocks = np.zeros((len(frames) + 1, HOP))
        blocks[0] = self._ola
        blocks[:-1] += frames[:, :HOP]
        blocks[1:] += frames[:, HOP:]
        self._ola = blocks[-1]
        return np.clip(np.rint(blocks[:-1].reshape(-1)), -32768, 32767).astype(np.int16)
