"""The time limit of one model call, enforced while the agent's events stream.

openai-agents can enforce it itself (`ModelSettings.timeout`), but then every streamed chunk
moves through a task and two queues: four loop iterations per token, and on a busy loop each
iteration waits behind every other session's work (at 100 devices on 2 cores a seven-word
answer took ~450 ms to stream from a server that had sent it at once). Here it costs one timer
per event and no task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agents.items import ToolCallItem, ToolCallOutputItem
from agents.stream_events import RunItemStreamEvent, StreamEvent


class ModelCallTimeout(Exception):
    """One model call took longer than its limit."""


async def within_model_deadline(
    events: AsyncIterator[StreamEvent], timeout: float | None
) -> AsyncIterator[StreamEvent]:
    """`events`, each model call (streaming included) limited to `timeout` seconds (None: no limit).

    Time spent in tools, and while the consumer is busy with an event, does not count; a tool's
    result starts the next model call with a fresh limit. Raises `ModelCallTimeout`.
    """
    loop = asyncio.get_running_loop()
    spent, tools_running = 0.0, 0
    while True:
        limited = timeout is not None and not tools_running
        waiting_since = loop.time()
        try:
            if not limited:
                event = await anext(events)
            else:
                assert timeout is not None
                limiter = asyncio.timeout_at(waiting_since + max(0.0, timeout - spent))
                try:
                    async with limiter:
                        event = await anext(events)
                except TimeoutError:
                    if limiter.expired():
                        raise ModelCallTimeout(f"no answer within {timeout:g} s") from None
                    raise
        except StopAsyncIteration:
            return
        if limited:
            spent += loop.time() - waiting_since
        if isinstance(event, RunItemStreamEvent):
            if isinstance(event.item, ToolCallItem):
                tools_running += 1
            elif isinstance(event.item, ToolCallOutputItem):
                tools_running = max(0, tools_running - 1)
                if not tools_running:
                    spent = 0.0  # the model is called again: a new limit
        yield event
