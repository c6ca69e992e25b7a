"""A three-station pipeline written with nothing but vixio's core.

    python examples/three_stations.py

Typed lines go in as user text; each station does one job; the output prints in order. Type
"stop" while an answer is being produced to see an interrupt cancel the turn everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from vixio import Chunk, Pipeline, Station, StreamCompleteChunk, TextChunk, TextDeltaChunk


class Words(Station):
    """Splits a user's text into words, streamed as deltas, then says the stream is complete."""

    handles = (TextChunk,)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        for word in chunk.text.split():
            await asyncio.sleep(0.05)  # pretend each word takes time, like LLM tokens
            yield TextDeltaChunk(text=word + " ", role="assistant")
        yield StreamCompleteChunk(source=self.name)


class Upper(Station):
    """Upper-cases streamed text; everything else passes through untouched."""

    handles = (TextDeltaChunk,)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextDeltaChunk)
        yield TextDeltaChunk(text=chunk.text.upper(), role=chunk.role)


class Sentence(Station):
    """Collects deltas into one final text when the stream completes; forgets them on interrupt."""

    handles = (TextDeltaChunk, StreamCompleteChunk)

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, TextDeltaChunk):
            self.parts.append(chunk.text)
            return
        yield TextChunk(text="".join(self.parts).strip(), role="assistant")
        self.parts.clear()

    async def on_interrupt(self) -> None:
        self.parts.clear()


async def main() -> None:
    pipeline = Pipeline([Words(), Upper(), Sentence()], session_id="demo")
    async with pipeline:
        await pipeline.push(TextChunk(text="hello from a three station pipeline", role="user"))
        print(await pipeline.get())  # TextChunk(text='HELLO FROM A THREE STATION PIPELINE', ...)

        await pipeline.push(TextChunk(text="this answer will be cut off", role="user"))
        await asyncio.sleep(0.12)  # two words in
        await pipeline.interrupt("user said stop")
        print(await pipeline.get())  # InterruptChunk(reason='user said stop', ...): the turn is gone


if __name__ == "__main__":
    asyncio.run(main())
