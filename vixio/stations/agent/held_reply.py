"""HeldReply: an agent turn started before the user's turn is confirmed (a preemptive turn).

The model runs on the draft transcript at once; its events wait here. When the turn is
confirmed with the same text, `replay()` hands them on (those already come at once, the rest
as they arrive) and the reply goes out as if it had started then; when the user speaks again
first, `cancel()` stops the run and the caller restores the provider's history from
`history_before`, so nothing of the attempt remains. Tools with side effects wait meanwhile
(`ToolExecutor.hold`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import Any

from vixio.providers.agent.base import AgentEvent, AgentTextDelta


class HeldReply:
    """One preemptive attempt: the model's events on `text`, buffered until adopted or cancelled."""

    def __init__(
        self,
        text: str,
        events: AsyncGenerator[AgentEvent, None],
        *,
        history_before: list[dict[str, Any]],
        turn_id: int = 0,
        name: str = "vixio-held-reply",
    ) -> None:
        self.text = text
        self.turn_id = turn_id
        """The model's input (the user's words, with any notes the turn adds)."""
        self.history_before = history_before
        """The provider's history before the attempt: what a cancelled attempt restores."""
        self.started_at = time.monotonic()
        self.first_token_at: float | None = None
        self._events = events
        self._buffer: list[AgentEvent] = []
        self._error: BaseException | None = None
        self._done = False
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=name)

    async def _run(self) -> None:
        try:
            async with contextlib.aclosing(self._events) as events:
                async for event in events:
                    if self.first_token_at is None and isinstance(event, AgentTextDelta) and event.text:
                        self.first_token_at = time.monotonic()
                    self._buffer.append(event)
                    self._changed.set()
        except Exception as exc:  # raised to the adopting turn, which apologises as for any failure
            self._error = exc
        finally:
            self._done = True
            self._changed.set()

    def saved_ms(self, confirmed_at: float) -> float:
        """How much sooner the reply's first token comes than had the model started at
        `confirmed_at`: the head start, up to the first token when it came before."""
        reached = confirmed_at if self.first_token_at is None else min(confirmed_at, self.first_token_at)
        return round(max(0.0, reached - self.started_at) * 1000, 1)

    async def replay(self) -> AsyncGenerator[AgentEvent, None]:
        """Every event, from the first; a failure of the run is raised here. Closing it early
        (the adopted reply was interrupted) stops the run."""
        index = 0
        try:
            while True:
                while index < len(self._buffer):
                    index += 1
                    yield self._buffer[index - 1]
                if self._done:
                    if self._error is not None:
                        raise self._error
                    return
                self._changed.clear()
                await self._changed.wait()
        finally:
            if not self._done:
                await self.cancel()

    async def cancel(self) -> None:
        """Stop the run and wait until it unwound (the provider has settled its history)."""
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({self._task})
