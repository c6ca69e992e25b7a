"""Named claims with a lease: one holder at a time, in the whole fleet (the `ClaimStore` part of
`Store`; vixio/state/sqlite_claims.py, redis_claims.py).

    holder = await store.claim("mqtt:aa:bb:cc:dd:ee:ff", "east/w0", ttl=30)
    if holder == "east/w0":
        ...                     # this process acts for the device until the claim lapses
    await store.release("mqtt:aa:bb:cc:dd:ee:ff", "east/w0")

Several vixio instances on one external MQTT broker all receive every device's messages; the
one that claims the device at its `hello` serves it (vixio/transports/xiaozhi/mqtt/ownership.py).
A claim is taken when it is free or lapsed and renewed by its holder; a holder that dies leaves
it to lapse after `ttl` seconds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class ClaimStore(ABC):
    """The claims part of `Store` (tests/state/test_claims_store.py runs it on both backends)."""

    @abstractmethod
    async def claim(self, name: str, holder: str, ttl: float) -> str:
        """Take `name` for `holder` for `ttl` seconds when it is free, lapsed or already
        `holder`'s (then renewed), atomically; who holds it after the call."""

    @abstractmethod
    async def release(self, name: str, holder: str) -> bool:
        """Give `name` up if `holder` holds it; whether it did."""
