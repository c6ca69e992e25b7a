"""The contract every text-to-speech backend fulfils.

A provider turns one piece of text (usually one sentence from the aggregator) into a stream
of signed 16-bit little-endian mono PCM at `sample_rate`. Consumers resample and encode; the
provider never frames audio for a transport.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator


class TTSError(Exception):
    """Synthesis failed; the message says which backend and why (status, reason, excerpt)."""


class TTSProvider(ABC):
    """A text-to-speech backend.

    Instances are cheap: heavy state (voices, models, libraries) is loaded once per process
    and shared by every instance that asks for the same voice, so one provider per session
    is fine.
    """

    name: str
    """Short backend name for logs and metrics, e.g. "piper"."""
    sample_rate: int
    """Rate in Hz of the PCM that `synthesize` yields."""

    async def initialize(self) -> None:
        """Load what synthesis needs. Idempotent; `synthesize` calls it when it was skipped."""

    @abstractmethod
    def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        """Yield int16 mono PCM chunks at `sample_rate` for `text`, the first one as early as possible.

        Implementations are async generators: closing one (`aclose()`, or cancelling the task
        iterating it) stops the work promptly, at the latest after the chunk being computed.
        Empty or whitespace-only text yields nothing. Failures raise `TTSError`.
        """

    async def warm(self) -> None:
        """Open a connection to a remote service now if its pool went cold (providers/prewarm.py),
        so the next `synthesize` does not wait for one; local voices need nothing."""

    async def close(self) -> None:
        """Release what this instance holds. Shared voices stay loaded for other sessions."""
