"""Time limits on a streamed agent reply: a model that never starts, stops halfway or leaves the user
in silence ends the turn; one that pauses mid-sentence has what it said so far spoken.

A provider's own HTTP timeout bounds one whole model call (30 s by default): far too long for a
person waiting in silence. `watch_reply` wraps the provider's event stream with shorter limits —
the first event of each model call (`first_token`), the gap between two events once it streams
(`gap`), and the user's silence (`silence`: since the reply started, its audio so far ended or a
tool returned, whatever the model streams meanwhile) — and can ask for a filler ("one moment")
when the first token is slow. While a tool runs (between its call and its result) no limit
applies: tools have their own timeouts. When the model pauses `pause` seconds after some text, or
the user has heard nothing for half the silence limit while text keeps coming, `on_pause` is
called (the agent then has the unfinished sentence spoken).

The provider's stream is read in the consumer's task, one event at a time, so backpressure still
reaches the model and cancelling the consumer closes the stream; only while a filler may be due
is the next event awaited in a task of its own. The silence limit and the pause are loop timers
around that await, not tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
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
    silence: float | None = 8.0
    """Seconds the user may hear nothing of the reply (see `watch_reply`'s `audio_until`)."""
    pause: float | None = 1.5
    """Seconds the model may pause after some text before `watch_reply`'s `on_pause` is called."""


class ReplyTimeout(AgentError):
    """The model did not start, stopped, or left the user in silence beyond a `ReplyTimeouts` limit."""

    def __init__(self, phase: Literal["first_token", "gap", "silence"], seconds: float, where: str) -> None:
        self.phase = phase
        self.seconds = seconds
        what = {"first_token": "sent nothing", "gap": "stopped streaming", "silence": "left the user in silence"}[phase]
        key = {
            "first_token": "agent.first_token_timeout",
            "gap": "agent.token_gap_timeout",
            "silence": "agent.silence_timeout",
        }[phase]
        super().__init__(f"the language model at {where} {what} for {seconds:g} s ({key})")


class Filler:
    """Yielded by `watch_reply` when the model is slow to start (speak a short filler)."""


FILLER = Filler()


async def watch_reply(
    events: AsyncIterator[AgentEvent],
    timeouts: ReplyTimeouts,
    *,
    where: str = "the agent",
    audio_until: Callable[[], float] | None = None,
    on_pause: Callable[[], None] | None = None,
) -> AsyncGenerator[AgentEvent | Filler, None]:
    """Yield `events` as they come; raise `ReplyTimeout` when a limit passes (the stream is closed).

    `audio_until()` is the loop time at which the audio of the reply so far ends (the silence
    limit counts from then); `on_pause()` is called from a loop callback, once per pause.
    """
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[AgentEvent] | None = None
    """The next event, awaited in a task of its own only while a filler may be due."""
    first, tools_running, filler_due = True, 0, timeouts.filler_after is not None
    since = quiet_from = loop.time()
    unsaid = False
    """Text arrived since the model last paused or ended its text."""
    last_pause = quiet_from

    def silent_until() -> float | None:
        if tools_running or timeouts.silence is None:
            return None
        return max(quiet_from, audio_until() if audio_until is not None else 0.0) + timeouts.silence

    def pause_at() -> float | None:
        """When to have the unfinished sentence spoken: after `pause` without new text, or once the
        user has heard nothing for half the silence limit even while text keeps coming (a steady
        but slow model: the silence limit then cuts only a reply that has nothing to say)."""
        if not unsaid or on_pause is None:
            return None
        times = [since + timeouts.pause] if timeouts.pause is not None else []
        if (silent_at := silent_until()) is not None and timeouts.silence is not None:
            times.append(max(silent_at - timeouts.silence / 2, last_pause + timeouts.silence / 2))
        return min(times, default=None)

    def paused() -> None:
        nonlocal unsaid, last_pause
        unsaid = False
        last_pause = loop.time()
        assert on_pause is not None
        on_pause()

    try:
        while True:
            limit = None if tools_running else (timeouts.first_token if first else timeouts.gap)
            deadline = None if limit is None else since + limit
            filler_at = (
                since + timeouts.filler_after
                if (filler_due and first and not tools_running and timeouts.filler_after is not None)
                else None
            )
            if filler_at is None and pending is None:
                # The usual path: the event is awaited right here, one timer per limit and no
                # extra task (each task hop is a loop iteration, and a busy loop's iterations are
                # what a token waits for under load).
                pause = loop.call_at(at, paused) if (at := pause_at()) is not None else None
                limiter = asyncio.timeout_at(deadline)
                alarm: _SilenceAlarm | None = None
                try:
                    async with limiter:
                        if (silent_at := silent_until()) is not None:
                            alarm = _SilenceAlarm(limiter, silent_at, silent_until)
                        item = await anext(events)
                except TimeoutError:
                    if not limiter.expired():
                        raise
                    if alarm is not None and alarm.rang:
                        raise ReplyTimeout("silence", timeouts.silence or 0.0, where) from None
                    raise ReplyTimeout("first_token" if first else "gap", limit or 0.0, where) from None
                except StopAsyncIteration:
                    return
                finally:
                    if pause is not None:
                        pause.cancel()
                    if alarm is not None:
                        alarm.cancel()
            else:
                # A filler may be due before the first token: await the event in a task, so the
                # filler can be said while the model is still silent.
                if pending is None:
                    pending = asyncio.ensure_future(anext(events))
                wakes = [t for t in (deadline, filler_at, silent_until()) if t is not None]
                timeout = max(0.0, min(wakes) - loop.time()) if wakes else None
                done, _ = await asyncio.wait({pending}, timeout=timeout)
                if not done:
                    now = loop.time()
                    if filler_at is not None and (deadline is None or filler_at < deadline) and now >= filler_at:
                        filler_due = False
                        yield FILLER
                        continue
                    if deadline is not None and now >= deadline:
                        raise ReplyTimeout("first_token" if first else "gap", limit or 0.0, where)
                    if (silent_at := silent_until()) is not None and now >= silent_at:
                        raise ReplyTimeout("silence", timeouts.silence or 0.0, where)
                    continue  # audio moved the silence limit on
                finished, pending = pending, None
                try:
                    item = finished.result()
                except StopAsyncIteration:
                    return
            if isinstance(item, AgentToolCall):
                tools_running += 1
                unsaid = False
            elif isinstance(item, AgentToolResult):
                tools_running = max(0, tools_running - 1)
                if tools_running == 0:
                    first = True  # the model is called again: a new first token
                    quiet_from = loop.time()
            elif isinstance(item, AgentTextDelta) and item.text:
                first = False
                unsaid = True
            elif isinstance(item, AgentTextEnd):
                unsaid = False
            assert isinstance(item, AgentTextDelta | AgentTextEnd | AgentToolCall | AgentToolResult)
            yield item
            since = loop.time()  # the consumer's time (speaking) is not the model's
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await _close(events)


class _SilenceAlarm:
    """Expires `limiter` once the reply has been silent too long; while audio keeps moving that
    moment later, the alarm moves with it (the limiter's own deadline is the token limit)."""

    def __init__(self, limiter: asyncio.Timeout, at: float, silent_until: Callable[[], float | None]) -> None:
        self.rang = False
        self._limiter = limiter
        self._silent_until = silent_until
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_at(at, self._check)

    def _check(self) -> None:
        at = self._silent_until()
        if at is None:
            return
        if at > self._loop.time():
            self._handle = self._loop.call_at(at, self._check)
            return
        self.rang = True
        self._limiter.reschedule(self._loop.time())

    def cancel(self) -> None:
        self._handle.cancel()


async def _close(events: AsyncIterator[AgentEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(RuntimeError):  # still running: it was cancelled mid-step and unwinds itself
            await aclose()
