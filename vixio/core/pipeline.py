"""A Pipeline: stations connected by bounded queues, one worker task per station.

    input ─► [inbox 0] ─► station 0 ─► [inbox 1] ─► station 1 ─► ... ─► [output]

- **Order**: each station handles its inbox one chunk at a time, so chunks leave in the order
  they came; chunks a station does not handle are forwarded in place.
- **Backpressure**: every queue is bounded; a slow station blocks the one before it, up to
  `push`, instead of growing memory.
- **Interrupts** do not queue behind data. `interrupt()` (or a station yielding an
  `InterruptChunk`) starts a new turn, removes queued chunks of older turns, cancels work in
  progress on them, runs every station's `on_interrupt` hook and puts the interrupt at the
  front of the output. Chunks of older turns that still show up later are dropped.
- **Errors**: an exception in `process` is logged with the session id and sent downstream as
  an `ErrorChunk`; the station keeps serving the next chunk.
- **Inline stations** (`Station.inline`: `process` never awaits) run in the task of the
  station before them, under a lock so a chunk `emit`ted from another task never interleaves
  with the host's: the hand-over to them costs no event-loop iteration.
- **Shutdown**: `stop()` cancels and awaits every task the pipeline started.

The workers, inline hand-overs, merging and error handling are pipeline_flow.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

from loguru import logger as root_logger

from vixio.core.chunk import AudioChunk, BaseChunk, Chunk, InterruptChunk
from vixio.core.pipeline_flow import ChunkFlow
from vixio.core.queue import ChunkQueue
from vixio.core.session_state import SessionState
from vixio.core.station import Station

if TYPE_CHECKING:
    from loguru import Logger

# A station that ignores cancellation for longer than this is reported, not awaited forever.
_CANCEL_GRACE_SECONDS = 2.0


class Pipeline(ChunkFlow):
    """Stations run in order for one session; with no stations, input goes straight to output."""

    def __init__(
        self,
        stations: Sequence[Station],
        *,
        session_id: str = "",
        queue_size: int = 32,
        logger: Logger | None = None,
    ) -> None:
        names = [s.name for s in stations]
        if len(set(map(id, stations))) != len(stations):
            raise ValueError(f"a station instance appears twice in {names}")
        self.stations = list(stations)
        self.session_id = session_id
        self.logger = (logger or root_logger).bind(session=session_id or "-")
        self._inboxes: list[ChunkQueue[Chunk]] = [ChunkQueue(queue_size) for _ in stations]
        self._inline: list[asyncio.Lock | None] = [
            asyncio.Lock() if s.inline and i else None for i, s in enumerate(stations)
        ]
        """Per station: a lock when it runs inline, in the task that forwards to it (not the first)."""
        self._output: ChunkQueue[Chunk] = ChunkQueue(queue_size)
        self._sink: Callable[[Chunk], bool] | None = None
        self._workers: list[asyncio.Task[None] | None] = [None] * len(stations)
        self._in_progress: list[Chunk | None] = [None] * len(stations)
        self._turn = 0
        self._floor = 0
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._interrupt_lock = asyncio.Lock()
        self._started = False
        self._stopped = False
        self.dropped_stale = 0
        """Chunks dropped because their turn was interrupted."""
        self.state: SessionState = SessionState()
        """Conversation state shared with the stations; a Session replaces it with its own."""

    # --- turns --------------------------------------------------------------------------------

    @property
    def turn_id(self) -> int:
        """The turn that new input is stamped with."""
        return self._turn

    def continue_turns(self, earlier: int) -> None:
        """Number this session's turns on from `earlier` turns of the same conversation (a device
        that reconnected): its first turn is `earlier + 1`, not 1 again. Before any turn began."""
        if self._turn:
            raise RuntimeError(f"continue_turns({earlier}) after turn {self._turn} began")
        self._turn = self._floor = max(0, earlier)

    def begin_turn(self) -> int:
        """Start a new turn without cancelling the previous one (nothing is dropped)."""
        self._turn += 1
        return self._turn

    @property
    def turn_in_progress(self) -> bool:
        """A station is working on something other than microphone audio (e.g. the agent is
        answering or waiting for a tool)."""
        return any(
            chunk is not None and not (isinstance(chunk, AudioChunk) and chunk.role == "user")
            for chunk in self._in_progress
        )

    def quiet_after(self, station: Station, *, output: bool = True, before_turn: int | None = None) -> bool:
        """Nothing is queued or being processed downstream of `station` (nor waits in the
        output, unless `output=False`). With `before_turn`, only chunks of earlier turns count:
        the station's own turn may already be on its way (its turn start, its metrics)."""
        index = self.stations.index(station)

        def busy(chunk: Chunk | None) -> bool:
            return chunk is not None and (before_turn is None or chunk.turn_id < before_turn)

        queues = [*self._inboxes[index + 1 :], *([self._output] if output else [])]
        return not any(busy(chunk) for queue in queues for chunk in queue) and not any(
            busy(chunk) for chunk in self._in_progress[index + 1 :]
        )

    def is_stale(self, chunk: BaseChunk) -> bool:
        """True for chunks of a turn that an interrupt cancelled.

        Microphone audio is never stale: an interrupt cancels the assistant's work, and the
        user's speech that caused a barge-in must reach the VAD and ASR whole.
        """
        if chunk.turn_id >= self._floor:
            return False
        return not (isinstance(chunk, AudioChunk) and chunk.role == "user")

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("pipeline already started")
        self._started = True
        for station in self.stations:
            station.attach(self)
        for station in self.stations:
            await station.start()
        for index in range(len(self.stations)):
            if self._inline[index] is None:
                self._spawn_worker(index)
        self.logger.debug("pipeline started: {}", " → ".join(s.name for s in self.stations))

    async def stop(self) -> None:
        """Cancel and await every worker, then stop every station. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        workers = [task for task in self._workers if task is not None]
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._workers = [None] * len(self.stations)
        for station in self.stations:
            try:
                await station.stop()
            except Exception:
                self.logger.exception("{} failed to stop", station.name)
        self.logger.debug("pipeline stopped")

    async def __aenter__(self) -> Pipeline:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- input and output ---------------------------------------------------------------------

    async def push(self, chunk: Chunk) -> None:
        """Feed a chunk to the first station; waits while the pipeline is full."""
        if not self._started or self._stopped:
            raise RuntimeError("push() on a pipeline that is not running")
        if isinstance(chunk, InterruptChunk):
            await self.interrupt(chunk.reason)
            return
        self._stamp(chunk, self.session_id, self._turn)
        if self._inboxes:
            await self._enqueue(self._inboxes[0], chunk)
        else:  # an empty pipeline passes input straight to its output
            await self._output.put(chunk)

    def push_nowait(self, chunk: Chunk) -> bool:
        """`push` without waiting: False, and nothing done, when the first inbox is full (or
        for an interrupt, which must be awaited). For callers that must not suspend."""
        if not self._started or self._stopped:
            raise RuntimeError("push_nowait() on a pipeline that is not running")
        queue = self._inboxes[0] if self._inboxes else self._output
        if isinstance(chunk, InterruptChunk) or queue.full():
            return False
        self._stamp(chunk, self.session_id, self._turn)
        self._pending += 1
        self._idle.clear()
        queue.put_nowait(chunk)
        return True

    def can_push_nowait(self) -> bool:
        """`push_nowait` of a data chunk would succeed now."""
        return self._started and not self._stopped and not (self._inboxes[0] if self._inboxes else self._output).full()

    async def emit(self, station: Station, chunk: Chunk) -> None:
        """Send `chunk` downstream of `station` now, outside its `process` (a tool speaking while
        the station waits on the model). Set `chunk.turn_id` first when it belongs to a turn."""
        self._stamp(chunk, self.session_id, self._turn)
        if self.is_stale(chunk):
            self.dropped_stale += 1
            return
        await self._forward(self.stations.index(station), chunk)

    def set_sink(self, sink: Callable[[Chunk], bool] | None) -> None:
        """Offer each chunk out of the last station to `sink` first, when nothing waits at the
        output: `sink(chunk)` returns True when it took the chunk (in the last station's task, so
        the hand-over costs no loop iteration), False to leave it to `get`."""
        self._sink = sink

    async def get(self) -> Chunk:
        """Next chunk out of the last station; chunks of interrupted turns are skipped."""
        while True:
            chunk = await self._output.get()
            if isinstance(chunk, InterruptChunk) or not self.is_stale(chunk):
                return chunk
            self.dropped_stale += 1

    def drain_output(self) -> list[Chunk]:
        """Every chunk waiting at the output now (handy after `join()` in tests)."""
        chunks: list[Chunk] = []
        while len(self._output):
            chunk = self._output.get_nowait()
            if isinstance(chunk, InterruptChunk) or not self.is_stale(chunk):
                chunks.append(chunk)
        return chunks

    async def outputs(self) -> AsyncIterator[Chunk]:
        """Every chunk out of the last station, forever."""
        while True:
            yield await self.get()

    async def join(self) -> None:
        """Wait until every chunk pushed so far went through every station."""
        await self._idle.wait()

    # --- interrupts ---------------------------------------------------------------------------

    async def interrupt(self, reason: str = "", *, origin: Station | None = None) -> int:
        """Cancel the current turn in every station at once; returns the new turn id.

        `origin`, when a station raised the interrupt itself, keeps running: what it yields
        next belongs to the new turn.
        """
        async with self._interrupt_lock:
            self._turn += 1
            self._floor = self._turn
            self.logger.info("interrupt ({}): turn {}", reason or "no reason", self._turn)
            restart: list[int] = []
            for index, station in enumerate(self.stations):
                self._forget(self._inboxes[index].purge(lambda c: not self.is_stale(c)))
                busy_with = self._in_progress[index]
                # An inline station stops with its host's task; the task raising the interrupt
                # (an inline origin's host) keeps running, as the origin does.
                if (
                    station is not origin
                    and busy_with is not None
                    and self.is_stale(busy_with)
                    and self._inline[index] is None
                    and self._workers[index] is not asyncio.current_task()
                ):
                    await self._cancel_worker(index)
                    restart.append(index)
            self.dropped_stale += len(self._output.purge(lambda c: not self.is_stale(c)))
            await asyncio.gather(*(self._run_interrupt_hook(s) for s in self.stations if s is not origin))
            for index in restart:
                self._spawn_worker(index)
            self._output.put_urgent(InterruptChunk(session_id=self.session_id, turn_id=self._turn, reason=reason))
            return self._turn

    async def _run_interrupt_hook(self, station: Station) -> None:
        try:
            await station.on_interrupt()
        except Exception as exc:
            self.logger.exception("{} failed in on_interrupt", station.name)
            self._output.put_urgent(self._error(station, exc, self._turn))

    async def _cancel_worker(self, index: int) -> None:
        task = self._workers[index]
        if task is None or task.done():
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CANCEL_GRACE_SECONDS)
        if not done:
            self.logger.error("{} ignored cancellation for {}s", self.stations[index].name, _CANCEL_GRACE_SECONDS)
