"""Time limits on a streamed agent reply: a model that never starts, or stops halfway, ends the turn.

A provider's own HTTP timeout bounds one whole model call (30 s by default): far too long for a
person waiting in silence. `watch_reply` wraps the provider's event stream with two shorter
limits — the first event of each model call (`first_token`) and the gap between two events once
it streams (`gap`) — and can ask for a filler ("one moment") when the first token is slow. While
a tool runs (between its call and its result) no limit applies: tools have their own timeouts.

The provider's stream is read in the consumer's task, one event at a time, so backpressure still
reaches the model and cancelling the consumer closes the stream; only while a filler may be due
is the next event awaited in a task of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from vixio.providers.agent.base import (
    AgentError,
    AgentEvent,
    AgentTextDelta,
    AgentTextEnd,
    AgentToolCall,
    AgentToolResult,
)


@dataclass(frozen=True, slots=True)
class ReplyTimeouts:
    """Limits on one agent turn; None turns a limit off."""

    first_token: float | None = 10.0
    """Seconds a model call may take to send its first event (restarts after each tool result)."""
    gap: float | None = 10.0
    """Seconds allowed between two events once the model streams."""
    filler_after: float | None = None
    """Seconds without a first token after which `FILLER` is yielded once per turn."""


class ReplyTimeout(AgentError):
    """The model did not start, or stopped, within a `ReplyTimeouts` limit."""

    def __init__(self, phase: Literal["first_token", "gap"], seconds: float, where: str) -> None:
        self.phase = phase
        self.seconds = seconds
        what = "sent nothing" if phase == "first_token" else "stopped streaming"
        key = "agent.first_token_timeout" if phase == "first_token" else "agent.token_gap_timeout"
        super().__init__(f"the language model at {where} {what} for {seconds:g} s ({key})")


class Filler:
    """Yielded by `watch_reply` when the model is slow to start (speak a short filler)."""


FILLER = Filler()


async def watch_reply(
    events: AsyncIterator[AgentEvent], timeouts: ReplyTimeouts, *, where: str = "the agent"
) -> AsyncIterator[AgentEvent | Filler]:
    """Yield `events` as they come; raise `ReplyTimeout` when a limit passes (the stream is closed)."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[AgentEvent] | None = None
    """The next event, awaited in a task of its own only while a filler may be due."""
    first, tools_running, filler_due = True, 0, timeouts.filler_after is not None
    since = loop.time()
    try:
        while True:
            limit = None if tools_running else (timeouts.first_token if first else timeouts.gap)
            deadline = None if limit is None else since + limit
            filler_at = since + timeouts.filler_after if (filler_due and first and not tools_running
                                                           and timeouts.filler_after is not None) else None
            if filler_at is None and pending is None:
                # The usual path: the event is awaited right here, one timer per event and no
                # extra task (each task hop is a loop iteration, and a busy loop's iterations are
                # what a token waits for under load).
                try:
                    if deadline is None:
                        item = await anext(events)
                    else:
                        limiter = asyncio.timeout_at(deadline)
                        try:
                            async with limiter:
                                item = await anext(events)
                        except TimeoutError:
                            if limiter.expired():
                                raise ReplyTimeout("first_token" if first else "gap", limit or 0.0, where) from None
                            raise
                except StopAsyncIteration:
                    return
            else:
                # A filler may be due before the first token: await the event in a task, so the
                # filler can be said while the model is still silent.
                if pending is None:
                    pending = asyncio.ensure_future(anext(events))
                wake = min(t for t in (deadline, filler_at) if t is not None) if (deadline or filler_at) else None
                done, _ = await asyncio.wait({pending}, timeout=None if wake is None else max(0.0, wake - loop.time()))
                if not done:
                    if filler_at is not None and (deadline is None or filler_at < deadline) and loop.time() >= filler_at:
                        filler_due = False
                        yield FILLER
                        continue
                    assert limit is not None
                    raise ReplyTimeout("first_token" if first else "gap", limit, where)
                finished, pending = pending, None
                try:
                    item = finished.result()
                except StopAsyncIteration:
                    return
            if isinstance(item, AgentToolCall):
                tools_running += 1
            elif isinstance(item, AgentToolResult):
                tools_running = max(0, tools_running - 1)
                if tools_running == 0:
                    first = True  # the model is called again: a new first token
            elif isinstance(item, AgentTextDelta) and item.text:
                first = False
            assert isinstance(item, AgentTextDelta | AgentTextEnd | AgentToolCall | AgentToolResult)
            yield item
            since = loop.time()  # the consumer's time (speaking) is not the model's
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await _close(events)


async def _close(events: AsyncIterator[AgentEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(RuntimeError):  # still running: it was cancelled mid-step and unwinds itself
            await aclose()
