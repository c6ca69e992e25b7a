"""The hourly prune: turns older than `memory.history_days` and background results held past their time.

Each prune is an erase (vixio/state/sqlite_thread.py): the pruned words leave the WAL at once too.
"""

from __future__ import annotations

import asyncio
import time

from loguru import logger

from vixio.config.memory import MemoryConfig
from vixio.state.store import Store, StoreError


async def prune_history_forever(store: Store, config: MemoryConfig, every: float = 3600.0) -> None:
    """Delete turns older than `memory.history_days` and background results held past their time
    (vixio/app/task_results.py), now and every `every` seconds (run as a task)."""
    while True:
        try:
            removed = await store.prune_history(time.time() - config.history_days * 86400)
            if removed:
                logger.info("state store: {} turn(s) older than {:g} days deleted", removed, config.history_days)
            expired = await store.prune_results(time.time())
            if expired:
                logger.info(
                    "state store: {} background result(s) deleted: their devices did not come back "
                    "within memory.resume_minutes",
                    expired,
                )
        except StoreError as exc:
            logger.warning("state store: old turns not deleted this time: {}", exc)
        await asyncio.sleep(every)
