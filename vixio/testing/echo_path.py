"""A reproducible loudspeaker-to-microphone echo path, for the barge-in benchmark and its tests.

What a single-microphone Xiaozhi board hears of its own reply: the reply PCM through a small
loudspeaker (band-limited to ~180 Hz–6 kHz and driven into soft, asymmetric clipping, which makes
the echo non-linear as 1–2 W speakers in a plastic case are), a room (`room_impulse_response`),
a delay of 40–250 ms that wanders by a few milliseconds (the firmware's playback queue and I2S
DMA buffers, `DelayWalk`), at an echo gain (−12 dB by default: a speaker 3 cm from the microphone
at a normal volume), plus the board's own noise floor.

The room is synthetic and documented rather than loaded from a package (pyroomacoustics would
bring scipy, ~40 MB, for one impulse response): a direct path, 12 early reflections at 2–25 ms
with random signs and 1/distance gains, and an exponentially decaying noise tail whose RT60 is the
given one (0.3 s by default: a furnished living room). A seed fixes every random choice, so the
same arguments give the same samples on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vixio.testing.device.stamps import MAX_TIMESTAMPS_IN_QUEUE, StampQueue

RATE = 16000


def room_impulse_response(seed: int, rt60_s: float = 0.3, length_s: float = 0.25) -> np.ndarray:
    """A unit-peak room impulse response (float32) whose tail decays 60 dB in `rt60_s`."""
    rng = np.random.default_rng(seed)
    n = int(length_s * RATE)
    t = np.arange(n) / RATE
    tail = rng.standard_normal(n) * np.exp(-6.91 * t / rt60_s) * 0.12
    tail[: int(0.002 * RATE)] = 0.0  # the tail starts after the direct sound
    rir = tail
    rir[0] += 1.0
    for _ in range(12):
        at = rng.uniform(0.002, 0.025)
        rir[int(at * RATE)] += rng.choice((-1.0, 1.0)) * 0.6 * 0.002 / at
    return (rir / np.abs(rir).max()).astype(np.float32)


def _fir_bandpass(low_hz: float, high_hz: float, taps: int = 129) -> np.ndarray:
    """Windowed-sinc band-pass: a small speaker's response (no bass, rolled-off treble)."""
    m = np.arange(taps) - (taps - 1) / 2

    def lowpass(fc: float) -> np.ndarray:
        return 2 * fc / RATE * np.sinc(2 * fc / RATE * m)

    h = (lowpass(high_hz) - lowpass(low_hz)) * np.hamming(taps)
    return h.astype(np.float32)


def loudspeaker(pcm: np.ndarray, drive: float = 2.5) -> np.ndarray:
    """Float audio (−1..1) as a small speaker plays it: band-limited, then soft-clipped with a
    second-harmonic asymmetry. At `drive` 2.5 a full-scale peak loses ~5 dB to clipping."""
    x = np.convolve(pcm, _fir_bandpass(180.0, 6000.0), mode="same")
    y = np.tanh(drive * x) / np.tanh(drive)
    return (y + 0.08 * y * y).astype(np.float32)


@dataclass(slots=True)
class DelayWalk:
    """The echo's delay, sample by sample: `base_ms` plus a bounded random walk (±`jitter_ms`)
    that steps every `step_ms` by up to 2 ms, as a device's playback buffer fill wanders."""

    base_ms: float
    jitter_ms: float = 20.0
    step_ms: float = 500.0
    seed: int = 0

    def delays(self, n: int) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        step = int(self.step_ms * RATE / 1000)
        steps = n // step + 1
        walk = np.clip(np.cumsum(rng.uniform(-2.0, 2.0, steps)), -self.jitter_ms, self.jitter_ms)
        per_sample = np.repeat(self.base_ms + walk, step)[:n]
        return (per_sample * RATE / 1000).astype(np.int64)


@dataclass(slots=True)
class EchoPath:
    """The board's microphone: `mic(played, user)` = echo of `played` + `user` + noise (int16)."""

    seed: int = 0
    delay_ms: float = 120.0
    jitter_ms: float = 20.0
    echo_gain_db: float = -12.0
    noise_dbfs: float = -62.0
    rt60_s: float = 0.3
    drive: float = 2.5

    def echo(self, played: np.ndarray) -> np.ndarray:
        """Float echo (−1..1) of `played` (int16 at 16 kHz) as the microphone hears it."""
        x = played.astype(np.float32) / 32768.0
        room = np.convolve(loudspeaker(x, self.drive), room_impulse_response(self.seed, self.rt60_s))[: len(x)]
        delays = DelayWalk(self.delay_ms, self.jitter_ms, seed=self.seed).delays(len(x))
        index = np.arange(len(x)) - delays
        delayed = np.where(index >= 0, room[np.clip(index, 0, None)], 0.0)
        return (delayed * 10 ** (self.echo_gain_db / 20)).astype(np.float32)

    def mic(self, played: np.ndarray, user: np.ndarray | None = None) -> np.ndarray:
        """int16 microphone signal; `user` (int16, same length or shorter) is added as spoken."""
        rng = np.random.default_rng(self.seed + 1)
        out = self.echo(played) + rng.standard_normal(len(played)).astype(np.float32) * 10 ** (self.noise_dbfs / 20)
        if user is not None:
            out[: len(user)] += user[: len(out)].astype(np.float32) / 32768.0
        return np.clip(out * 32768.0, -32768, 32767).astype(np.int16)


def erle_db(mic: np.ndarray, cleaned: np.ndarray, frame: int = 160) -> float:
    """Echo return loss enhancement over echo-only audio: mic power over cleaned power, in dB,
    over the frames where the microphone carried echo (quieter frames say nothing about it)."""
    m = mic[: len(cleaned)].astype(np.float64)
    c = cleaned.astype(np.float64)
    whole = len(c) // frame * frame
    pm = (m[:whole].reshape(-1, frame) ** 2).mean(axis=1)
    pc = (c[:whole].reshape(-1, frame) ** 2).mean(axis=1)
    loud = pm > max(pm.max() * 1e-3, 1.0)
    if not loud.any():
        return 0.0
    return float(10 * np.log10(pm[loud].sum() / max(pc[loud].sum(), 1e-9)))


def device_stamps(
    played_at: list[tuple[int, int]],
    mic_frames: int,
    frame: int = 960,
    phase: int = 0,
    max_queued: int = MAX_TIMESTAMPS_IN_QUEUE,
) -> list[int]:
    """The v2 timestamp of each uplink frame, as the firmware stamps them (`StampQueue`, whose
    docstring cites the firmware): a downlink frame's stamp is queued when the speaker task has
    written it out (`played_at`: (sample, stamp) in play order), each microphone frame takes the
    oldest queued stamp, and with more than `max_queued` queued the frame goes out as 0 (and the
    stamp is still dropped)."""
    out: list[int] = []
    queue = StampQueue(max_queued)
    i = 0
    for k in range(mic_frames):
        encoded_at = (k + 1) * frame + phase
        while i < len(played_at) and played_at[i][0] <= encoded_at:
            queue.written_out(played_at[i][1])
            i += 1
        out.append(queue.take())
    return out
