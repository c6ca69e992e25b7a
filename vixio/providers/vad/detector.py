"""Speech start/end events from a VAD stream: windowing, hysteresis, minimum durations.

Pure logic around a `VADStream`: no I/O, no clock, deterministic. Feed it int16 PCM of any
length (the Xiaozhi uplink sends 960 samples per 60 ms frame, which is not a multiple of
Silero's 512-sample window, so the remainder is carried to the next call) and it returns the
events the new audio completed. Positions are sample offsets from the first sample fed since
construction or `reset()`.

The rules, in windows of `stream.window_samples`:

- a window is *speech* when its probability >= `threshold`, *silence* when < `neg_threshold`,
  and in between it changes nothing (hysteresis: a borderline window neither starts nor ends);
- **start**: speech that lasts `min_speech_ms` without a silence window; a silence window
  before that cancels the candidate, so clicks and short noises never start a turn;
- **end**: silence that lasts `min_silence_ms` without a speech window; a speech window
  before that cancels the candidate, so pauses between words do not end a turn;
- **pause** (with `early_silence_ms`): silence that lasts `early_silence_ms`, once per stretch of
  silence; a preemptive turn starts there. **resume**: a speech window after a pause, before the
  end. A consumer that reads the transcript may `end_now` the utterance at a pause, or
  `extend_silence` the silence that ends it;
- event positions are padded by `speech_pad_ms` (earlier for start, later for end), clamped to
  the audio seen, so a consumer that slices the utterance keeps soft onsets and tails;
- **quiet audio** (with `quiet_below_dbfs`): while nobody speaks, audio quieter than that is
  silence without being scored (`QuietGate`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from vixio.providers.vad.base import VADStream, to_float

with warnings.catch_warnings():  # deprecated in 3.11, gone from 3.13 (the audioop-lts package then)
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop


@dataclass(frozen=True, slots=True)
class VADEvent:
    """A speech boundary found by `VoiceActivityDetector`."""

    type: Literal["start", "end", "pause", "resume"]
    """"start": speech began; "end": speech ended; "pause": early silence (`sample` is where it
    began); "resume": speech again after a pause."""
    sample: int
    """Where the boundary is (padded), in samples from the start of the stream."""
    detected_at: int
    """Samples scored when the event was decided; `detected_at - sample` is the detection delay."""
    probability: float
    """Probability of the window that decided the event."""


class QuietGate:
    """Which idle audio needs no model: windows quieter than a level no voice command is spoken at.

    A quiet room through a device's microphone and noise suppression (or the comfort noise of
    the firmware's Opus DTX) is far below speech: a voice at a metre reads about -40 to -20 dBFS,
    such a room -60 dBFS or less. Scoring that audio only ever says "silence", so while nobody
    speaks (no utterance, not even a candidate start) a piece of audio whose every 32 ms window
    is under `below_dbfs` is silence without running the model. Anything louder is scored as
    always, and so is everything from a candidate start to the utterance's end, so speech is
    decided exactly as before; only its onset can come a window later when it rises out of
    silence below the level. Nothing is skipped until the model has heard `SETTLE` windows in a
    row under `WAKE` (after start-up and after each utterance), so its state is a silent one.

    A window's level is its RMS from `audioop` (C, ~0.5 µs a window on the event loop, where numpy
    took ~13 µs for a frame and may drop the GIL). Not an adaptive noise gate: speech under
    a loud background (a hum, a fan) is found by the model from its onset, which a gate keyed
    to the background's level would hide (measured: speech 10 dB under a hum was missed)."""

    WAKE = 0.1
    """A scored window at this probability or more keeps everything scored."""
    SETTLE = 8
    """Scored windows in a row under `WAKE` before audio may go unscored (~0.26 s)."""
    BACKOFF = 8
    """Pieces of audio scored without measuring after one at or above the level (~0.5 s): a room
    above the level pays for the measurement on one frame in nine."""

    def __init__(self, below_dbfs: float) -> None:
        if not -120 <= below_dbfs <= 0:
            raise ValueError(f"quiet gate level must be in [-120, 0] dBFS, got {below_dbfs}")
        self.below_dbfs = below_dbfs
        self._limit = 32768.0 * 10 ** (below_dbfs / 20)  # RMS of int16 samples
        self.reset()

    def reset(self) -> None:
        self._calm = 0  # scored windows in a row under WAKE
        self._loud_for = 0  # pieces still scored without measuring
        self.skipped = 0
        """Windows left unscored since the last reset."""

    def quiet(self, windows: np.ndarray) -> bool:
        """Whether `windows` (int16 [count, window]) go unscored. Call only while nobody speaks;
        report what the model said of scored windows with `heard`."""
        if self._loud_for:  # a room above the level: measured again only every BACKOFF pieces
            self._loud_for -= 1
            return False
        if self._calm < self.SETTLE:
            return False
        data, width = windows.data.cast("B"), 2 * windows.shape[1]
        for start in range(0, len(data), width):
            if audioop.rms(data[start : start + width], 2) >= self._limit:
                self._loud_for = self.BACKOFF
                return False
        self.skipped += windows.shape[0]
        return True

    def heard(self, probabilities: Sequence[float]) -> None:
        """What the model said of the windows it scored."""
        for probability in probabilities:
            self._calm = 0 if probability >= self.WAKE else self._calm + 1


class VoiceActivityDetector:
    """Turns PCM into start/end events with one `VADStream`; one instance per session."""

    def __init__(
        self,
        stream: VADStream,
        *,
        threshold: float = 0.5,
        neg_threshold: float | None = None,
        min_speech_ms: int = 250,
        min_silence_ms: int = 500,
        speech_pad_ms: int = 30,
        early_silence_ms: int = 0,
        quiet_below_dbfs: float | None = None,
    ) -> None:
        """Configure the rules; `neg_threshold` defaults to `threshold - 0.15` (Silero's own);
        `quiet_below_dbfs` (None: off) leaves idle audio under that level unscored (`QuietGate`)."""
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if neg_threshold is None:
            neg_threshold = max(threshold - 0.15, 0.01)
        if not 0.0 < neg_threshold <= threshold:
            raise ValueError(f"neg_threshold must be in (0, threshold={threshold}], got {neg_threshold}")
        for key, value in (
            ("min_speech_ms", min_speech_ms),
            ("min_silence_ms", min_silence_ms),
            ("speech_pad_ms", speech_pad_ms),
            ("early_silence_ms", early_silence_ms),
        ):
            if value < 0:
                raise ValueError(f"{key} must be >= 0, got {value}")
        self.stream = stream
        self.threshold = threshold
        self.neg_threshold = neg_threshold
        rate = stream.sample_rate
        self._window = stream.window_samples
        self._min_speech = rate * min_speech_ms // 1000
        self._min_silence = rate * min_silence_ms // 1000
        self._pad = rate * speech_pad_ms // 1000
        # A pause as long as the end would never come first: no pauses then.
        self._early = rate * early_silence_ms // 1000 if 0 < early_silence_ms < min_silence_ms else 0
        self.gate = QuietGate(quiet_below_dbfs) if quiet_below_dbfs is not None else None
        self._carry = b""
        self.reset(reset_stream=False)

    def reset(self, *, reset_stream: bool = True) -> None:
        """Forget all audio and state; offsets restart at 0."""
        if reset_stream:
            self.stream.reset()
        if self.gate is not None:
            self.gate.reset()
        self._carry = b""  # PCM bytes short of a whole window
        self._consumed = 0  # samples scored so far (whole windows)
        self._fed = 0  # samples fed so far, including the carried remainder
        self._speaking = False
        self._speech_since: int | None = None  # candidate start while not speaking
        self._silence_since: int | None = None  # candidate end while speaking
        self._last_end = 0  # a start is never padded back past the previous end
        self._paused = False  # a pause event was sent for the current stretch of silence
        self._silence_needed = self._min_silence  # silence that ends this utterance
        self.last_probability = 0.0

    @property
    def speaking(self) -> bool:
        """True between a start event and its end event."""
        return self._speaking

    @property
    def ending(self) -> bool:
        """Speech has gone quiet: the next windows may decide its end, which the user is waiting
        for (the batching VAD scores them without lingering for other sessions' windows)."""
        return self._speaking and self._silence_since is not None

    @property
    def silence_start(self) -> int | None:
        """Where the current stretch of silence began (samples), None while speech goes on."""
        return self._silence_since if self._speaking else None

    def end_now(self, silence_start: int) -> VADEvent | None:
        """End the utterance at the pause that began at `silence_start`, now (its transcript is
        evidently complete); None when the user spoke again since (that pause is gone)."""
        if not (self._speaking and self._paused and self._silence_since == silence_start):
            return None
        return self._end(min(silence_start + self._pad, self._consumed), self._consumed, self.last_probability)

    def extend_silence(self, silence_start: int, silence_ms: int) -> bool:
        """Let the utterance end only after `silence_ms` of silence from the pause that began at
        `silence_start` (its transcript is evidently unfinished); False when that pause is gone.
        The next speech window restores `min_silence_ms`."""
        if not (self._speaking and self._silence_since == silence_start):
            return False
        self._silence_needed = max(self._min_silence, self.stream.sample_rate * silence_ms // 1000)
        return True

    @property
    def samples_fed(self) -> int:
        """Samples fed since construction or the last `reset()`."""
        return self._fed

    def feed(self, pcm: bytes | np.ndarray) -> list[VADEvent]:
        """Score the new audio and return the events it completed, in order.

        `pcm` is int16 mono at `stream.sample_rate`: little-endian bytes or an int16 array.
        """
        windows = self._windows(pcm)
        if not windows.shape[0]:
            return []
        if self._gated(windows):
            return self._decide([0.0] * windows.shape[0])
        return self._decide(self._heard(self.stream.probabilities(to_float(windows))))

    async def feed_async(self, pcm: bytes | np.ndarray) -> list[VADEvent]:
        """`feed` for the event loop: the windows are scored by `stream.score` (batched with other
        sessions' and off the loop where the backend supports it). Await each call before the next."""
        windows = self._windows(pcm)
        if not windows.shape[0]:
            return []
        if self._gated(windows):
            return self._decide([0.0] * windows.shape[0])
        return self._decide(self._heard(await self.stream.score(windows, urgent=self.ending)))

    async def feed_parts_async(self, parts: Sequence[bytes]) -> list[list[VADEvent]]:
        """`feed_async` for several pieces of PCM bytes in a row, in one scoring round trip: the
        events each piece completes, exactly as feeding them one by one would give."""
        if any(len(pcm) % 2 for pcm in parts):
            raise ValueError(f"PCM must be whole int16 samples, got pieces of {[len(pcm) for pcm in parts]} bytes")
        counts, samples, done = [], len(self._carry) // 2, 0
        for pcm in parts:  # the windows each piece completes
            samples += len(pcm) // 2
            counts.append(samples // self._window - done)
            done += counts[-1]
        windows = self._windows(b"".join(parts))  # joined as bytes: no numpy copy on the loop
        if not windows.shape[0]:
            scored: Sequence[float] = []
        elif self._gated(windows):
            scored = [0.0] * windows.shape[0]
        else:
            scored = self._heard(await self.stream.score(windows, urgent=self.ending))
        events, offset = [], 0
        for count in counts:
            events.append(self._decide(scored[offset : offset + count]))
            offset += count
        return events

    def _gated(self, windows: np.ndarray) -> bool:
        """Whether `windows` go unscored (silence): only while nobody speaks, not even a candidate."""
        if self.gate is None or self._speaking or self._speech_since is not None:
            return False
        return self.gate.quiet(windows)

    def _heard(self, probabilities: Sequence[float]) -> Sequence[float]:
        if self.gate is not None:
            self.gate.heard(probabilities)
        return probabilities

    def _windows(self, pcm: bytes | np.ndarray) -> np.ndarray:
        """The whole windows the new audio completes, int16 of shape [count, window] (read-only);
        the rest is carried. Kept int16 here: the float conversion runs where the scoring does.

        Joined and cut as bytes, never by numpy on the loop thread: numpy drops the GIL to copy
        anything over 500 elements, and taking it back waits until another thread running Python
        lets go (measured: a 1,471-sample concatenate beside a busy thread ~200 us, bytes ~1 us)."""
        if isinstance(pcm, np.ndarray):
            if pcm.dtype != np.int16:
                raise TypeError(f"feed() takes int16 PCM bytes or an int16 array, got dtype {pcm.dtype}")
            data = pcm.tobytes()
        else:
            data = bytes(pcm)
            if len(data) % 2:
                raise ValueError(f"PCM must be whole int16 samples, got {len(data)} bytes")
        self._fed += len(data) // 2
        audio = self._carry + data if self._carry else data
        whole = len(audio) - len(audio) % (2 * self._window)
        self._carry = audio[whole:]
        return np.frombuffer(audio, dtype="<i2", count=whole // 2).reshape(-1, self._window)

    def _decide(self, probabilities: Sequence[float]) -> list[VADEvent]:
        events: list[VADEvent] = []
        for probability in probabilities:
            event = self._step(float(probability))
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> list[VADEvent]:
        """End speech at the end of the audio fed so far (e.g. when the stream closes)."""
        if not self._speaking:
            return []
        end = self._silence_since if self._silence_since is not None else self._fed
        return [self._end(min(end + self._pad, self._fed), self._fed, self.last_probability)]

    def _step(self, probability: float) -> VADEvent | None:
        start = self._consumed
        self._consumed += self._window
        done = self._consumed
        self.last_probability = probability
        speech = probability >= self.threshold
        silence = probability < self.neg_threshold
        if not self._speaking:
            if speech and self._speech_since is None:
                self._speech_since = start
            elif silence:
                self._speech_since = None
            if self._speech_since is not None and done - self._speech_since >= self._min_speech:
                boundary = max(self._speech_since - self._pad, self._last_end, 0)
                self._speaking, self._speech_since, self._silence_since = True, None, None
                return VADEvent("start", boundary, done, probability)
            return None
        resumed = None
        if speech:
            if self._paused:
                resumed = VADEvent("resume", start, done, probability)
            self._silence_since, self._paused, self._silence_needed = None, False, self._min_silence
        elif silence and self._silence_since is None:
            self._silence_since = start
        if self._silence_since is not None:
            quiet = done - self._silence_since
            if quiet >= self._silence_needed:
                return self._end(min(self._silence_since + self._pad, done), done, probability)
            if self._early and not self._paused and quiet >= self._early:
                self._paused = True
                return VADEvent("pause", self._silence_since, done, probability)
        return resumed

    def _end(self, boundary: int, detected_at: int, probability: float) -> VADEvent:
        self._speaking, self._speech_since, self._silence_since = False, None, None
        self._paused, self._silence_needed = False, self._min_silence
        self._last_end = boundary
        return VADEvent("end", boundary, detected_at, probability)
