"""The VAD extension point: a provider per process holds the model, a stream per session.

A `VADProvider` is built once per process and shared by every session; it owns whatever is
expensive (model weights, an inference session). `create_stream()` hands each session a
`VADStream`, which holds only that session's recurrent state and is cheap to make.

A stream scores fixed-size windows of float32 audio in [-1, 1]; `VoiceActivityDetector`
(`detector.py`) turns arbitrary-length PCM into those windows and the scores into events.
Streams are not thread-safe: a session drives its stream from one caller at a time. On the
event loop, sessions call `await stream.score(windows)`: a backend that can batch (Silero
ONNX) scores every session's windows together on a worker thread; the default scores inline.
`score` also takes int16 windows (PCM as it arrives), so the conversion to float runs where
the scoring runs, not on the event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

INT16_SCALE = 1.0 / 32768.0
"""int16 PCM → float32 in [-1, 1]: `pcm.astype(np.float32) * INT16_SCALE` (the one conversion)."""


def to_float(windows: np.ndarray) -> np.ndarray:
    """`windows` as float32 in [-1, 1]: int16 PCM is converted, float passes through."""
    return windows.astype(np.float32) * INT16_SCALE if windows.dtype == np.int16 else windows


class VADStream(ABC):
    """Per-session speech scorer: recurrent state over consecutive windows."""

    sample_rate: int
    """Samples per second the stream expects, e.g. 16000."""
    window_samples: int
    """Exact number of samples `probability` takes, e.g. 512 at 16 kHz (32 ms)."""

    @abstractmethod
    def probability(self, window: np.ndarray) -> float:
        """Return the speech probability in [0, 1] of the next window.

        `window` is float32 mono in [-1, 1] with exactly `window_samples` samples;
        consecutive calls are one continuous stream.
        """

    def probabilities(self, windows: np.ndarray) -> list[float]:
        """Score consecutive windows (shape [count, window_samples]) in order."""
        return [self.probability(window) for window in windows]

    async def score(self, windows: np.ndarray, *, urgent: bool = False) -> list[float]:
        """`probabilities` for the event loop (float32 or int16 windows): batching backends
        override this to run off the loop, together with other sessions' windows. Await each
        call before the next. `urgent`: these windows may decide the end of an utterance (a
        user waits for the answer), so a batching backend should not hold them back for company."""
        return self.probabilities(to_float(windows))

    @abstractmethod
    def reset(self) -> None:
        """Forget the state, before audio that does not continue the previous window."""

    def close(self) -> None:
        """Give back what the stream borrowed from its provider; the stream is unusable after."""

    def _check_window(self, window: np.ndarray) -> np.ndarray:
        """Return `window` as a contiguous, writable float32 array or raise a ValueError."""
        if window.ndim != 1 or window.shape[0] != self.window_samples:
            raise ValueError(f"VAD window must be 1-D with {self.window_samples} samples, got shape {window.shape}")
        if window.dtype != np.float32 or not window.flags.c_contiguous or not window.flags.writeable:
            window = np.ascontiguousarray(window, dtype=np.float32).copy()
        return window


class VADProvider(ABC):
    """Per-process VAD backend: loads the model once and makes per-session streams."""

    name: str = "vad"
    """Short backend name for logs and metrics."""
    sample_rate: int
    """Samples per second its streams expect."""
    window_samples: int
    """Samples per window its streams score."""

    @abstractmethod
    def create_stream(self) -> VADStream:
        """Return a fresh stream with zero state for one session."""
