"""Run one station (or a few) on a list of chunks and get what came out, in order.

out = await run_stations([MyStation()], [TextChunk(text="hi", role="user")])
assert [c.kind for c in out] == ["text", "stream_complete"]
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from vixio.core.chunk import Chunk
from vixio.core.pipeline import Pipeline
from vixio.core.station import Station


async def run_stations(
    stations: Sequence[Station],
    chunks: Iterable[Chunk],
    *,
    session_id: str = "test",
    queue_size: int = 32,
) -> list[Chunk]:
    """Push `chunks` through a fresh pipeline of `stations`; return every output chunk."""
    pipeline = Pipeline(stations, session_id=session_id, queue_size=max(queue_size, 1))
    out: list[Chunk] = []

    async def collect() -> None:
        while True:
            out.append(await pipeline.get())

    async with pipeline:
        # Collect concurrently so a long input never deadlocks on a full output queue.
        collector = asyncio.create_task(collect())
        try:
            for chunk in chunks:
                await pipeline.push(chunk)
            await pipeline.join()
        finally:
            collector.cancel()
            await asyncio.gather(collector, return_exceptions=True)
        out.extend(pipeline.drain_output())
    return out


async def run_station(station: Station, chunks: Iterable[Chunk], **kwargs: object) -> list[Chunk]:
    """`run_stations` for a single station."""
    return await run_stations([station], chunks, **kwargs)  # type: ignore[arg-type]
