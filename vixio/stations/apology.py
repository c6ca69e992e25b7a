"""ApologyStation: ends a failed turn in a pipeline that has no TTS station (text only).

A failing turn (ASR or agent error, a reply that broke off) arrives as an ErrorChunk instead of
the reply's StreamCompleteChunk. The TTS station answers it with a spoken apology and ends the
reply; without one, this station does the same in text: the apology as the assistant's sentence
(Xiaozhi: `tts sentence_start`), then the reply's end (Xiaozhi: `tts stop`, without which the
device stays in `speaking`). With a TTS station in the pipeline it is not needed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vixio.core.chunk import Chunk, ErrorChunk, StreamCompleteChunk, TextChunk
from vixio.core.station import Station


class ApologyStation(Station):
    handles = (ErrorChunk,)
    inline = True  # no awaits: runs in the task of the station before it

    def __init__(
        self, *, apology: str = "Sorry, something went wrong. Please try again.", name: str | None = None
    ) -> None:
        super().__init__(name)
        self.apology = apology
        """Shown after a failure; empty: the reply just ends."""

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        yield chunk
        assert isinstance(chunk, ErrorChunk)
        self.logger.debug("turn failed in {}: {}; apologising in text", chunk.source, chunk.message)
        if self.apology:
            yield TextChunk(text=self.apology, role="assistant")
        yield StreamCompleteChunk(source=self.name)
