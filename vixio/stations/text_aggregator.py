"""TextAggregatorStation: one final user text per turn, whatever the ASR streams.

A streaming ASR sends partial text as deltas; the agent wants the whole utterance once. Deltas
are joined and sent as one TextChunk at the end of the turn; a final TextChunk from the ASR
replaces the partials. Assistant text passes through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vixio.core.chunk import Chunk, TextChunk, TextDeltaChunk, TurnEndChunk
from vixio.core.station import Station


class TextAggregatorStation(Station):
    handles = (TextDeltaChunk, TextChunk, TurnEndChunk)
    inline = True  # joins text, no awaits: runs in the ASR's task

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self._parts: list[str] = []

    async def on_interrupt(self) -> None:
        self._parts.clear()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, TextDeltaChunk) and chunk.role == "user":
            self._parts.append(chunk.text)
        elif isinstance(chunk, TextChunk) and chunk.role == "user":
            self._parts.clear()  # the final transcript supersedes the partials
            yield chunk
        elif isinstance(chunk, TurnEndChunk):
            text = "".join(self._parts).strip()
            self._parts.clear()
            if text:
                yield TextChunk(text=text, role="user")
            yield chunk
        else:
            yield chunk
