"""Limits counted in the state store, so that every worker and every instance of a fleet counts
together: a client that reconnects, or lands on another instance, does not start afresh.

    registrations = StoreRate(store, "register", limit=10, window=60.0)
    if not await registrations.allow(device_id): ...     # the 11th in a minute, wherever it came

The count is `Store.count_event` (SQLite: one file for the machine's workers; Redis: INCR and
EXPIRE NX, one round trip, for the fleet). A store that cannot be reached lets the event through
(one WARNING per outage): the per-connection limits still hold, and a limit must not turn a Redis
outage into refused devices.
"""

from __future__ import annotations

from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.state.store import Store, StoreError

MAX_KEY_CHARS = 128
"""Longer ids (device-controlled) are cut to this before they become a key."""


class StoreRate:
    """At most `limit` events per key in each window of `window` seconds, counted in the store."""

    def __init__(self, store: Store, name: str, limit: int, window: float = 60.0) -> None:
        self.store = store
        self.name = name
        self.limit = limit
        self.window = window
        self._failures = LogThrottle(first=1, every=60.0)

    async def allow(self, key: str) -> bool:
        """Count one event for `key`; False when it is over the limit (it is counted all the same)."""
        try:
            count = await self.store.count_event(f"{self.name}:{key[:MAX_KEY_CHARS]}", self.window)
        except StoreError as exc:
            if self._failures.hit() is not None:
                logger.warning(
                    "the {} limit is not counted while the state store fails ({}); "
                    "each connection's own limit still holds",
                    self.name,
                    exc,
                )
            return True
        return count <= self.limit
