"""A Session binds one pipeline to one connection and holds what belongs to that conversation.

The transport pushes the device's input with `push`, and the session pumps the pipeline's
output into `on_output` (which the transport turns into messages and audio). History and tools
live here, not in stations, so they outlive an interrupted turn and go away with the session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from loguru import logger

from vixio.core.chunk import Chunk, InterruptChunk
from vixio.core.eager import eager_task
from vixio.core.pipeline import Pipeline
from vixio.core.session_state import Message, SessionState

__all__ = ["Message", "OutputHandler", "Session", "SessionState", "fan_out"]

OutputHandler = Callable[[Chunk], Awaitable[None]]


def fan_out(*handlers: OutputHandler) -> OutputHandler:
    """One output handler calling each of `handlers` in order (e.g. the device first)."""

    async def handle(chunk: Chunk) -> None:
        for handler in handlers:
            await handler(chunk)

    return handle


class Session:
    """One conversation: a running pipeline, its output pump and its state."""

    def __init__(
        self,
        session_id: str,
        pipeline: Pipeline,
        on_output: OutputHandler,
        *,
        device_id: str = "",
        state: SessionState | None = None,
    ) -> None:
        self.session_id = session_id
        self.device_id = device_id
        self.pipeline = pipeline
        self.state = state or pipeline.state
        pipeline.state = self.state  # stations see the session's state
        self.logger = logger.bind(session=session_id, device=device_id or "-")
        self.created_at = time.monotonic()
        self.last_activity = self.created_at
        self._on_output = on_output
        self._pump: asyncio.Task[None] | None = None
        self._pump_holds = False  # the pump has taken a chunk and not finished handling it
        self._rest: asyncio.Future[None] | None = None  # a chunk taken at once, still being handled
        self._rest_name = f"vixio-{session_id}-output-now"
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def start(self) -> None:
        await self.pipeline.start()
        self._pump = asyncio.create_task(self._pump_output(), name=f"vixio-{self.session_id}-output")
        self.pipeline.set_sink(self._take_now)
        self.logger.info("session started")

    async def push(self, chunk: Chunk) -> None:
        """Feed device input to the pipeline (waits when the pipeline is full)."""
        self.last_activity = time.monotonic()
        await self.pipeline.push(chunk)

    def push_nowait(self, chunk: Chunk) -> bool:
        """`push` without waiting; False (nothing pushed) when the pipeline is full."""
        if not self.pipeline.push_nowait(chunk):
            return False
        self.last_activity = time.monotonic()
        return True

    async def interrupt(self, reason: str = "") -> int:
        """Cancel the current turn; returns the new turn id."""
        return await self.pipeline.interrupt(reason)

    async def close(self) -> None:
        """Stop the pump and the pipeline; safe to call more than once."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.pipeline.set_sink(None)
        for task in (self._pump, self._rest):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.pipeline.stop()
        self.logger.info("session closed after {:.1f}s", time.monotonic() - self.created_at)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def __aenter__(self) -> Session:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _take_now(self, chunk: Chunk) -> bool:
        """The pipeline's sink: with nothing queued or being handled, `chunk` is handled at once
        in the last station's task (the pump's wake-up is a loop iteration, ~10-15 ms on a busy
        server); if the handler has to wait, the rest runs in a task the pump waits for before
        its next chunk, so the order stays the pipeline's."""
        if self._pump_holds or (self._rest is not None and not self._rest.done()) or self._closed.is_set():
            return False
        rest = eager_task(self._handle(chunk), name=self._rest_name)
        self._rest = None if rest.done() else rest
        return True

    async def _pump_output(self) -> None:
        async for chunk in self.pipeline.outputs():
            self._pump_holds = True
            try:
                if self._rest is not None:
                    await self._rest  # a chunk before this one, taken at once, is still being handled
                    self._rest = None
                    if not isinstance(chunk, InterruptChunk) and self.pipeline.is_stale(chunk):
                        self.pipeline.dropped_stale += 1  # an interrupt came meanwhile, as `get` skips
                        continue
                await self._handle(chunk)
            finally:
                self._pump_holds = False

    async def _handle(self, chunk: Chunk) -> None:
        try:
            await self._on_output(chunk)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A failing sink must not stop the conversation; the next chunk may go through.
            self.logger.exception("output handler failed on {}", chunk.kind)
