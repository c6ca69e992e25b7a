"""How chunks move between a Pipeline's stations (the half of `Pipeline` a caller never calls).

One worker task per station reads its inbox one chunk at a time; a station marked inline runs in
the task that forwards to it instead, under its lock. A station that merges gets the chunks
queued behind the one it takes joined into one (`Station.merge`). What `process` yields is
stamped with the session and turn of the chunk it came from and forwarded, unless its turn was
interrupted meanwhile; an exception becomes an `ErrorChunk` downstream. Every chunk queued
counts as pending until a station is done with it: `Pipeline.join` waits for none.

A mixin of `Pipeline` (pipeline.py), which owns the queues and state named below.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from vixio.core.chunk import UNSET_TURN, BaseChunk, Chunk, ErrorChunk, InterruptChunk
from vixio.core.queue import ChunkQueue
from vixio.core.station import Station

if TYPE_CHECKING:
    from loguru import Logger


class ChunkFlow:
    """The workers, forwarding and bookkeeping of `Pipeline`."""

    stations: list[Station]
    session_id: str
    logger: Logger
    dropped_stale: int
    _inboxes: list[ChunkQueue[Chunk]]
    _inline: list[asyncio.Lock | None]
    _output: ChunkQueue[Chunk]
    _sink: Callable[[Chunk], bool] | None
    _workers: list[asyncio.Task[None] | None]
    _in_progress: list[Chunk | None]
    _pending: int
    _idle: asyncio.Event

    if TYPE_CHECKING:  # Pipeline's

        def is_stale(self, chunk: BaseChunk) -> bool: ...

        async def interrupt(self, reason: str = "", *, origin: Station | None = None) -> int: ...

    def _spawn_worker(self, index: int) -> None:
        name = f"vixio-{self.session_id or 'pipeline'}-{self.stations[index].name}"
        self._workers[index] = asyncio.create_task(self._run_station(index), name=name)

    async def _run_station(self, index: int) -> None:
        station = self.stations[index]
        inbox = self._inboxes[index]
        try:
            while True:
                chunk = await inbox.get()
                if station.merges and len(inbox):
                    chunk = self._merge_queued(station, inbox, chunk)
                try:
                    await self._handle(index, chunk)
                finally:
                    self._done_with_one()
        except asyncio.CancelledError:
            pass

    def _merge_queued(self, station: Station, inbox: ChunkQueue[Chunk], chunk: Chunk) -> Chunk:
        """`chunk` joined with the chunks queued behind it that the station merges (see
        `Station.merge`); each one absorbed counts as done."""
        while len(inbox) and isinstance(chunk, station.handles) and not self.is_stale(chunk):
            following = inbox.peek()
            merged = None if self.is_stale(following) else station.merge(chunk, following)
            if merged is None:
                break
            inbox.get_nowait()
            self._done_with_one()
            chunk = merged
        return chunk

    async def _process(self, index: int, station: Station, chunk: Chunk) -> None:
        try:
            # `process` is an async generator (it has `aclose`), annotated as the iterator it returns.
            async with contextlib.aclosing(station.process(chunk)) as produced:  # type: ignore[type-var]
                async for out in produced:
                    self._stamp(out, chunk.session_id, chunk.turn_id)
                    if isinstance(out, InterruptChunk):
                        await self.interrupt(out.reason, origin=station)
                    elif not self.is_stale(out):
                        await self._forward(index, out)
                    else:
                        self.dropped_stale += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.logger.opt(exception=exc).error("{} failed on {}: {}", station.name, chunk.kind, exc)
            await self._forward(index, self._error(station, exc, chunk.turn_id))

    async def _forward(self, index: int, chunk: Chunk) -> None:
        following = index + 1
        if following == len(self.stations):
            if self._sink is None or len(self._output) or not self._sink(chunk):
                await self._output.put(chunk)
        elif (lock := self._inline[following]) is not None:
            async with lock:  # taken at once unless another task's chunk is on its way through
                await self._handle(following, chunk)  # in this task: what its worker would do
        else:
            await self._enqueue(self._inboxes[following], chunk)

    async def _handle(self, index: int, chunk: Chunk) -> None:
        """Station `index` on `chunk`: dropped when stale, processed when handled, else forwarded."""
        station = self.stations[index]
        self._in_progress[index] = chunk
        try:
            if self.is_stale(chunk):
                self.dropped_stale += 1
            elif isinstance(chunk, station.handles):
                await self._process(index, station, chunk)
            else:
                await self._forward(index, chunk)
        finally:
            self._in_progress[index] = None

    async def _enqueue(self, queue: ChunkQueue[Chunk], chunk: Chunk) -> None:
        self._pending += 1
        self._idle.clear()
        try:
            await queue.put(chunk)
        except BaseException:
            self._done_with_one()
            raise

    def _done_with_one(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()

    def _forget(self, removed: list[Chunk]) -> None:
        self.dropped_stale += len(removed)
        for _ in removed:
            self._done_with_one()

    def _error(self, station: Station, exc: BaseException, turn_id: int) -> ErrorChunk:
        message = f"{type(exc).__name__}: {exc}"
        return ErrorChunk(
            session_id=self.session_id, turn_id=turn_id, source=station.name, message=message, exception=exc
        )

    @staticmethod
    def _stamp(chunk: BaseChunk, session_id: str, turn_id: int) -> None:
        if not chunk.session_id:
            chunk.session_id = session_id
        if chunk.turn_id == UNSET_TURN:
            chunk.turn_id = turn_id
