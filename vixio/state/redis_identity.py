"""The Redis store's identity pins and pending re-binds.

Keys (P is `state.prefix`; vixio/state/redis.py lists the others):

    P pins                       hash  device -> [client_id, at]: who the device is (Store.pin_identity)
    P pins-seen                  hash  device -> when its pinned pair was last seen
    P rebinds                    hash  [device, client_id] -> [first, last, attempts]: re-binds pending
    P rebind-order               zset  the same members scored by their latest attempt (bounds them)

A mixin of `RedisStore`. Pinning, re-pinning and requesting a re-bind are one script each, so an
instance never sees a pin without its seen time, nor a re-bind the bounds should have dropped.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vixio.state.store import PIN_SEEN_EVERY, IdentityPin, RebindRequest

if TYPE_CHECKING:
    from vixio.state.redis_link import Op


class RedisIdentity:
    """Who each device is, for `RedisStore`."""

    prefix: str

    if TYPE_CHECKING:  # RedisStore's

        async def _call(self, op: Op, *, write: bool) -> Any: ...

        def _script(self, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Op: ...

    def _pin_keys(self) -> list[str]:
        return [self.prefix + "pins", self.prefix + "pins-seen", self.prefix + "rebinds", self.prefix + "rebind-order"]

    async def pin_identity(self, device_id: str, client_id: str) -> IdentityPin:
        now = time.time()
        pin = json.dumps([client_id, now], ensure_ascii=False)
        value, seen = await self._call(
            self._script("PIN_IDENTITY", self._pin_keys()[:2], [device_id, client_id, pin, repr(now), PIN_SEEN_EVERY]),
            write=True,
        )
        client_id, at = json.loads(value)
        return IdentityPin(device_id, client_id, at, seen=float(seen))

    async def identity_pin(self, device_id: str) -> IdentityPin | None:
        keys = self._pin_keys()
        value, seen = await asyncio.gather(  # one round trip
            self._call(lambda r: r.hget(keys[0], device_id), write=False),
            self._call(lambda r: r.hget(keys[1], device_id), write=False),
        )
        if value is None:
            return None
        client_id, at = json.loads(value)
        return IdentityPin(device_id, client_id, at, float(seen or at))

    async def repin_identity(self, device_id: str, client_id: str) -> None:
        now = time.time()
        pin = json.dumps([client_id, now], ensure_ascii=False)
        await self._call(
            self._script("REPIN_IDENTITY", self._pin_keys(), [device_id, pin, repr(now), _rebind_prefix(device_id)]),
            write=True,
        )

    async def unpin_identity(self, device_id: str) -> bool:
        return bool(
            await self._call(
                self._script("REPIN_IDENTITY", self._pin_keys(), [device_id, "", "0", _rebind_prefix(device_id)]),
                write=True,
            )
        )

    async def request_rebind(self, device_id: str, client_id: str, per_device: int, total: int) -> None:
        member = json.dumps([device_id, client_id], ensure_ascii=False)
        await self._call(
            self._script(
                "REQUEST_REBIND",
                self._pin_keys()[2:],
                [member, repr(time.time()), _rebind_prefix(device_id), max(1, per_device), max(1, total)],
            ),
            write=True,
        )

    async def rebind_requests(self, device_id: str | None = None) -> list[RebindRequest]:
        entries = await self._call(lambda r: r.hgetall(self.prefix + "rebinds"), write=False)
        requests = [RebindRequest(*json.loads(member), *json.loads(value)) for member, value in entries.items()]
        if device_id is not None:
            requests = [r for r in requests if r.device_id == device_id]
        return sorted(requests, key=lambda r: (-r.last, r.device_id, r.client_id))

    async def dismiss_rebind(self, device_id: str, client_id: str) -> bool:
        member = json.dumps([device_id, client_id], ensure_ascii=False)
        return bool(await self._call(self._script("DISMISS_REBIND", self._pin_keys()[2:], [member]), write=True))


def _rebind_prefix(device_id: str) -> str:
    """How the members of the device's re-binds start (`[device, client]` as JSON)."""
    return json.dumps([device_id], ensure_ascii=False)[:-1] + ", "
