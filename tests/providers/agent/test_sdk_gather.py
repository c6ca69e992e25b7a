"""The eager hook gather behaves as openai-agents' own gather_with_cancel."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from agents.util._asyncio_tasks import gather_with_cancel

from vixio.patches.openai_agents import eager_gather_with_cancel, install
from vixio.testing.loop_ticks import LoopTicks

pytestmark = pytest.mark.unit

GATHERS = pytest.mark.parametrize("gather", [gather_with_cancel, eager_gather_with_cancel], ids=["sdk", "eager"])
TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="outer")


async def at_once(value: int) -> int:
    return value


async def after(seconds: float, value: int) -> int:
    TRACE.set(f"inner {value}")  # set before suspending, read after: one context throughout
    await asyncio.sleep(seconds)
    assert TRACE.get() == f"inner {value}"
    return value


async def fails_at_once() -> int:
    raise ValueError("hook failed")


async def fails_later() -> int:
    await asyncio.sleep(0.01)
    raise KeyError("later")


@GATHERS
async def test_results_in_order_whether_they_finish_at_once_or_later(gather) -> None:
    assert await gather(at_once(1), after(0.02, 2), at_once(3), after(0.01, 4)) == (1, 2, 3, 4)
    assert TRACE.get() == "outer"  # a child's context changes stay in the child


@GATHERS
async def test_a_failure_cancels_the_siblings_and_is_reported(gather) -> None:
    reported: list[BaseException] = []
    slow = asyncio.Event()

    async def waits_forever() -> int:
        try:
            await asyncio.Event().wait()
        finally:
            slow.set()
        return 0

    for failing in (fails_at_once, fails_later):
        slow.clear()
        with pytest.raises((ValueError, KeyError)):
            await gather(waits_forever(), failing(), at_once(1), on_child_failure=reported.append)
        assert slow.is_set()  # the sibling was cancelled and drained before the error came out
    assert [type(error) for error in reported] == [ValueError, KeyError]


@GATHERS
@pytest.mark.parametrize("delay", [0.0, 0.01])
async def test_cancelling_the_caller_cancels_the_children(gather, delay: float) -> None:
    cancelled = asyncio.Event()

    async def child() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 0

    task = asyncio.create_task(gather(at_once(1), child()))
    await asyncio.sleep(delay)
    if not delay:
        await asyncio.sleep(0)  # the gather has started its children, which have not run yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


async def test_hooks_that_finish_at_once_cost_no_loop_iteration() -> None:
    async with LoopTicks() as ticks:
        before = ticks.count
        await eager_gather_with_cancel(at_once(1), at_once(2), at_once(3))
        eager = ticks.count - before
        before = ticks.count
        await gather_with_cancel(at_once(1), at_once(2), at_once(3))
        sdk = ticks.count - before
    assert eager == 0 and sdk >= 3, (eager, sdk)


def test_installed_on_the_checked_version_only_where_hooks_are_gathered() -> None:
    import agents.agent as agent_module
    import agents.run_internal.run_loop as run_loop
    import agents.run_internal.tool_execution as tool_execution
    import agents.run_internal.tool_planning as tool_planning
    import agents.run_internal.turn_resolution as turn_resolution

    assert install()
    assert run_loop.gather_with_cancel is eager_gather_with_cancel
    assert agent_module.gather_with_cancel is eager_gather_with_cancel  # the tools' is_enabled checks
    assert turn_resolution.gather_with_cancel is eager_gather_with_cancel
    assert tool_execution.gather_with_cancel is eager_gather_with_cancel  # hooks, is_enabled checks
    assert tool_planning.gather_with_cancel is eager_gather_with_cancel  # the six tool executors
