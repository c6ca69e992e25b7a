"""The ASR extension point: one utterance of PCM in, its transcript out.

An `ASRProvider` is built once per process and shared by every session: the VAD has already
cut the audio into utterances, so `transcribe` is a plain request/response with no
per-session state. Implementations must be safe to call from many sessions at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class ASRError(Exception):
    """Transcription failed: the message says which provider, what was asked and why."""


class ASRProvider(ABC):
    """Speech to text for whole utterances."""

    name: str = "asr"
    """Short backend name for logs and metrics."""
    timeout: float | None = None
    """Seconds one transcription may take (a remote service's `asr.timeout`); None: no bound. The
    ASR station gives a turn's transcriptions since its speech ended this much in all."""

    @abstractmethod
    async def initialize(self) -> None:
        """Load the model or check the configuration; idempotent, safe to call concurrently.

        `transcribe` calls it when it was not called, so calling it at startup only moves the
        cost (and any configuration error) out of the first user's turn.
        """

    @abstractmethod
    async def transcribe(self, pcm: bytes, sample_rate: int, *, language: str | None = None) -> str:
        """Return the text of one utterance ("" when nothing was said).

        `pcm` is signed 16-bit little-endian mono at `sample_rate` Hz; `language` (an ISO 639-1
        code such as "en" or "zh") overrides the provider's default for this call.
        Raises `ASRError` when the backend fails.
        """

    async def warm(self) -> None:
        """Open a connection to a remote service now if its pool went cold (providers/prewarm.py),
        so the next `transcribe` does not wait for one; local models need nothing."""

    @abstractmethod
    async def close(self) -> None:
        """Release what `initialize` acquired; idempotent."""


def check_pcm(name: str, pcm: bytes, sample_rate: int) -> None:
    """Raise a ValueError naming the provider when `pcm`/`sample_rate` are not usable."""
    if sample_rate <= 0:
        raise ValueError(f"{name}: sample_rate must be positive, got {sample_rate}")
    if len(pcm) % 2:
        raise ValueError(f"{name}: PCM must be whole int16 samples, got {len(pcm)} bytes")
