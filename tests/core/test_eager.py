"""eager_task: a coroutine's first step runs at once; what is left continues in a task."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from vixio.core.eager import eager_task
from vixio.testing.loop_ticks import LoopTicks

pytestmark = pytest.mark.unit

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="caller")


async def at_once(value: int) -> int:
    WHO.set("child")
    return value


async def later(value: int, gate: asyncio.Event) -> int:
    WHO.set("child")
    await gate.wait()
    return value * 2 if WHO.get() == "child" else -1  # its own context throughout


async def fails() -> None:
    raise ValueError("boom")


async def test_what_finishes_at_once_costs_no_loop_iteration_and_keeps_the_callers_context() -> None:
    async with LoopTicks() as ticks:
        before = ticks.count
        future = eager_task(at_once(7))
        assert future.done() and future.result() == 7 and ticks.count == before
    assert WHO.get() == "caller"


async def test_what_waits_continues_in_a_task_in_its_own_context() -> None:
    gate = asyncio.Event()
    started = []

    async def records() -> int:
        started.append(True)
        return await later(3, gate)

    task = eager_task(records())
    assert started == [True] and not task.done()  # the first step ran before eager_task returned
    gate.set()
    assert await asyncio.wait_for(task, 2) == 6
    assert WHO.get() == "caller"


async def test_failures_and_cancellation_reach_the_caller_and_the_coroutine() -> None:
    failed = eager_task(fails())
    assert failed.done() and isinstance(failed.exception(), ValueError)
    cancelled_inside = []

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled_inside.append(True)
            raise

    task = eager_task(waits_forever())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled_inside == [True]
