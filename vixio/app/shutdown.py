"""A stop that always ends: each step of a process's shutdown is awaited for a bounded time.

A step that does not finish (a store that stopped answering mid-call, a library waiting on a
socket that will never close) is abandoned with one warning that names it, and the next step
runs, so `vixio serve` exits and its port and run directory are released. A step that raises
is logged with its traceback and does not skip the steps after it. A step still running after
`SLOW_AFTER` seconds is named in the log before it ends or is abandoned, so a slow shutdown
says what it is waiting for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from loguru import logger

STEP_LIMIT = 10.0
"""Seconds one shutdown step may take (a session's last turns are stored within it)."""

SLOW_AFTER = 3.0
"""Seconds after which a step still running is named in the log."""


async def step(what: str, closing: Awaitable[object], limit: float = STEP_LIMIT) -> bool:
    """Await `closing` (one step of a shutdown, named `what` in the log) for at most `limit`
    seconds; True when it finished, False when it raised or was abandoned."""
    task = asyncio.ensure_future(closing)
    try:
        done, _ = await asyncio.wait({task}, timeout=min(SLOW_AFTER, limit))
        if not done:
            logger.info("shutdown: still waiting for {} after {:g} s", what, min(SLOW_AFTER, limit))
            done, _ = await asyncio.wait({task}, timeout=max(0.0, limit - SLOW_AFTER))
    except asyncio.CancelledError:  # the shutdown itself was cancelled: so is its step
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)  # a step that ignores its cancellation is left behind
        logger.warning("shutdown: {} did not finish within {:g} s; going on without it", what, limit)
        return False
    if task.cancelled():
        logger.warning("shutdown: {} was cancelled", what)
        return False
    if (error := task.exception()) is not None:
        logger.opt(exception=error).error("shutdown: {} failed; going on", what)
        return False
    return True
