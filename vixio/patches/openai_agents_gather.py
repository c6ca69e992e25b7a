"""Run openai-agents' per-turn hooks without a round of tasks when they finish at once.

Before each model call openai-agents gathers its lifecycle hooks and prompt getters with
`gather_with_cancel`: a task per awaitable, `asyncio.gather`, `asyncio.wait` — five loop
iterations per gather even when every awaitable is a no-op that returns on its first step
(the default hooks, a string system prompt). Three such gathers come before the request is sent,
so a turn waits 15 extra loop iterations for its first token, and on a busy server each one
waits behind every other session's work (at 100 devices on 2 cores, ~15 ms apiece).

The agent's tool list is gathered the same way before each model call (each tool's `is_enabled`,
a plain bool for every tool vixio builds: three more iterations on the way to the first token).
After every model response, even one without tool calls, the SDK gathers its six tool executors
(function tools, computer, custom, shell, apply-patch, local shell) and again each function tool's
`is_enabled`: a dozen tasks per answer while its speech is being synthesised; then the end-of-turn
hooks.

`install()` gives those modules (run loop, turn preparation, agent, turn resolution, tool
planning and tool execution) a `gather_with_cancel` that
first steps each coroutine once, in a copy of the caller's context (as a task would). Those
that return are done; one that suspends continues in a task of its own, with that same context
and the awaitable it is waiting for, and from then on the SDK's semantics apply (wait for all,
cancel and drain the siblings when one fails or the caller is cancelled). A tool call that waits
(for the device, say) is such a continuation, and function tools still run concurrently: the SDK
starts a task per call itself. Applied only to the openai-agents versions it was checked against.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import types
from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger

from vixio.core.eager import continuation

_CHECKED_VERSIONS = ("0.24.",)
_MODULES = ("agents.run_internal.run_loop", "agents.run_internal.turn_preparation", "agents.agent",
            "agents.run_internal.turn_resolution", "agents.run_internal.tool_planning",
            "agents.run_internal.tool_execution")


def install() -> bool:
    """Patch the hook gathers once; True when the fast path is in place."""
    try:
        import agents

        tasks_module = importlib.import_module("agents.util._asyncio_tasks")
        modules = [importlib.import_module(name) for name in _MODULES]
    except ImportError:
        return False
    if not str(getattr(agents, "__version__", "")).startswith(_CHECKED_VERSIONS):
        return False
    original = tasks_module.gather_with_cancel
    patched = False
    for module in modules:
        current = getattr(module, "gather_with_cancel", None)
        if getattr(current, "vixio_eager", False):
            patched = True
        elif current is original:
            module.gather_with_cancel = eager_gather_with_cancel
            patched = True
    if patched:
        logger.debug("openai-agents: hooks that finish at once are gathered without tasks")
    return patched


async def eager_gather_with_cancel(
    *awaitables: Awaitable[Any], on_child_failure: Callable[[BaseException], None] | None = None
) -> tuple[Any, ...]:
    """`agents.util._asyncio_tasks.gather_with_cancel`, without tasks for what finishes at once."""
    results: list[Any] = [None] * len(awaitables)
    pending: list[tuple[int, asyncio.Future[Any]]] = []
    failure: BaseException | None = None
    resumed = False
    for index, awaitable in enumerate(awaitables):
        # Every awaitable starts, as with the SDK's tasks, even after a sibling failed.
        if not isinstance(awaitable, types.CoroutineType):
            pending.append((index, asyncio.ensure_future(awaitable)))
            continue
        context = contextvars.copy_context()
        try:
            yielded = context.run(awaitable.send, None)
        except StopIteration as done:
            results[index] = done.value
            continue
        except BaseException as error:  # noqa: BLE001 - re-raised below, after the siblings are drained
            failure = failure or error
            continue
        task = asyncio.get_running_loop().create_task(continuation(awaitable, yielded), context=context)
        pending.append((index, task))
        resumed = True
    if resumed:
        # Let the continuations take over what their coroutines wait for before anything may
        # cancel them: a task cancelled before its first step would never reach the coroutine.
        try:
            await asyncio.sleep(0)
        except BaseException:
            for _, future in pending:
                future.cancel()
            await asyncio.gather(*(future for _, future in pending), return_exceptions=True)
            raise
    if failure is not None:
        for _, future in pending:
            future.cancel()
        await asyncio.gather(*(future for _, future in pending), return_exceptions=True)
        if on_child_failure is not None:
            on_child_failure(failure)
        raise failure
    if not pending:
        return tuple(results)
    tasks_module = importlib.import_module("agents.util._asyncio_tasks")
    gathered = await tasks_module.gather_with_cancel(*(future for _, future in pending),
                                                     on_child_failure=on_child_failure)
    for (index, _), value in zip(pending, gathered, strict=True):
        results[index] = value
    return tuple(results)


eager_gather_with_cancel.vixio_eager = True  # type: ignore[attr-defined]
