"""Run a coroutine's first step now, as Python 3.12's eager tasks do, on Python 3.11 too.

On a busy loop every new task waits a whole loop iteration (every other session's work) before
its first step; work that could finish, or at least start, at once waits too. `eager_task(coro)`
runs the first step right away, in a copy of the caller's context (as a task would): if the
coroutine finishes there the result is a done future; otherwise `continuation` carries it on in
a task, in that same context, from the awaitable it is waiting for.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any


def eager_task(
    coro: Coroutine[Any, Any, Any], *, name: str | None = None, context: contextvars.Context | None = None
) -> asyncio.Future[Any]:
    """`asyncio.create_task(coro)` whose first step runs now (Python 3.12's `eager_start`)."""
    loop = asyncio.get_running_loop()
    context = context if context is not None else contextvars.copy_context()
    try:
        yielded = context.run(coro.send, None)
    except StopIteration as done:
        future = loop.create_future()
        future.set_result(done.value)
        return future
    except BaseException as error:  # noqa: BLE001 - the outcome, as an eager task's would be
        future = loop.create_future()
        if isinstance(error, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(error)
        return future
    return loop.create_task(continuation(coro, yielded), name=name, context=context)


@types.coroutine
def continuation(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Continue `coro`, which already ran its first step and yielded `yielded` (what it waits
    for), as the body of a task: the task waits for what is yielded, then resumes it."""
    while True:
        try:
            sent = yield yielded
        except BaseException as error:  # noqa: BLE001 - handed to the coroutine, as a task would
            try:
                yielded = coro.throw(error)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value
