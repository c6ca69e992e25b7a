"""A three-station pipeline written with nothing but vixio's core.

    python examples/three_stations.py

Typed lines go in as user text; each station does one job; the output prints in order. Type
"stop" while an answer is being produced to see an interrupt cancel the turn everywhere; end
with Ctrl-D (the last answer is printed first). Lines can be piped in too:

    printf 'hello from three stations\n' | python examples/three_stations.py
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

from vixio import Chunk, InterruptChunk, Pipeline, Station, StreamCompleteChunk, TextChunk, TextDeltaChunk


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


def show(chunk: Chunk) -> None:
    if isinstance(chunk, TextChunk):
        print(f"< {chunk.text}", flush=True)
    elif isinstance(chunk, InterruptChunk):
        print(f"< (interrupted: {chunk.reason})", flush=True)


async def print_outputs(pipeline: Pipeline) -> None:
    """Print what comes out of the pipeline, in order, as it comes."""
    async for chunk in pipeline.outputs():
        show(chunk)


async def typed_lines() -> AsyncIterator[str]:
    """Lines from stdin (a terminal or a pipe), read without blocking the pipeline."""
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        yield line.decode(errors="replace")


async def main() -> None:
    pipeline = Pipeline([Words(), Upper(), Sentence()], session_id="demo")
    async with pipeline:
        printer = asyncio.create_task(print_outputs(pipeline))
        print("Type a line and Enter; 'stop' while an answer is coming; Ctrl-D to quit.", flush=True)
        async for line in typed_lines():
            text = line.strip()
            if text == "stop":
                await pipeline.interrupt("user said stop")
            elif text:
                await pipeline.push(TextChunk(text=text, role="user"))
        await pipeline.join()  # every line went through every station: print what is left
        printer.cancel()
        for chunk in pipeline.drain_output():
            show(chunk)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
