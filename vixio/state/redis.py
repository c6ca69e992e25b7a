"""The Redis store: the state of a whole fleet of vixio instances on one Redis or Valkey server.

    state: {backend: redis, url: "redis://redis.internal:6379/0", password: "${REDIS_PASSWORD}",
            fleet_secret: "${VIXIO_FLEET_SECRET}"}

Keys (P is `state.prefix`, "vixio:" by default, so several fleets can share one server; values
are JSON arrays, times unix seconds). Here:

    P schema                     "1": the layout version (a newer one is refused)
    P admissions                 hash  device -> [via, at]
    P profiles                   hash  device -> [profile, at]
    P pairings                   hash  [device, companion, client_id] -> at
    P held:DEVICE                list  [payload, until] of background results held for it
    P events:KEY                 int   events in KEY's current window (Store.count_event; expires with it)

and one mixin per topic for the rest, each listing its keys: redis_history.py (P turns:DEVICE,
P turn-text:DEVICE, P memories, P devices), redis_identity.py (P pins, P pins-seen, P rebinds,
P rebind-order), redis_sessions.py (P sessions, P device-sessions:DEVICE, P workers),
redis_facts.py (P facts:DEVICE), redis_reminders.py (P reminders:DEVICE, P reminder-due,
P fired:DEVICE, P fired-claims:DEVICE, P clip:TOKEN, P clips), redis_claims.py (P claim:NAME),
redis_voiceprints.py (P voiceprints:DEVICE, P voiceprint-devices).

Bounds: a device's turns by `state.max_turns` and `memory.history_days` (redis_history.py). A
turn's texts are bounded by the recorder (vixio/memory/recording.py), the long-term memory by
`memory.max_chars`, facts by `MAX_FACTS_PER_DEVICE` (what RDB/AOF keep: docs/privacy.md#redis).
A device's held results expire with the latest of them (at most `keep`). Sessions are listed
while their worker's heartbeat is current (redis_sessions.py).

Every call is one command, or one Lua script from redis_scripts.py where it must be atomic; calls made at the
same moment share one round trip (redis_link.py: pipelines, and what an outage does). A turn is one call; a
session start's reads share one round trip. Nothing is cached here: every instance reads what another just
wrote. Standalone Redis/Valkey (or a primary), not Redis Cluster: the session scripts reach keys they find.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from vixio.state import redis_scripts as scripts
from vixio.state.redis_claims import RedisClaims
from vixio.state.redis_facts import RedisFacts
from vixio.state.redis_history import RedisHistory
from vixio.state.redis_identity import RedisIdentity
from vixio.state.redis_link import Op, RedisLink, unusable
from vixio.state.redis_reminders import RedisReminders
from vixio.state.redis_sessions import RedisSessions
from vixio.state.redis_voiceprints import RedisVoiceprints
from vixio.state.store import (
    Admission,
    AdmissionKind,
    PairingApproval,
    Store,
    StoreError,
)

LAYOUT_VERSION = 1
PRUNE_BATCH = 200
"""Devices' turn keys pruned per script call (bounds how long one call holds the server)."""


def redacted(url: str) -> str:
    """`url` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


class RedisStore(
    RedisClaims, RedisHistory, RedisIdentity, RedisSessions, RedisFacts, RedisReminders, RedisVoiceprints, Store
):
    """`Store` on a Redis server (see the module docstring for keys, bounds and failures)."""

    def __init__(
        self,
        url: str,
        *,
        password: str | None = None,
        prefix: str = "vixio:",
        timeout: float = 1.0,
        max_turns: int = 1000,
        history_seconds: float = 30 * 86400.0,
    ) -> None:
        self.url = url
        self.location = redacted(url)
        self.prefix = prefix
        self._max_turns = max_turns
        self._history_ms = int(history_seconds * 1000)
        self._link = RedisLink(url, password=password, timeout=timeout, location=self.location)
        self._open = False

    @property
    def round_trips(self) -> int:
        """Round trips to the server so far (pipelines sent): what bench/bench_state.py counts."""
        return self._link.round_trips

    # --- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._open:
            return
        from redis.exceptions import RedisError

        await self._link.connect()
        client, key = self._link.client, self.prefix + "schema"
        try:
            await client.set(key, LAYOUT_VERSION, nx=True)
            version = int(await client.get(key) or 0)
        except RedisError as exc:
            await self._link.close()
            raise StoreError(unusable(f"state.url {self.location}", exc)) from None
        if version > LAYOUT_VERSION:
            await self._link.close()
            raise StoreError(
                f"state.url {self.location}: keys under {self.prefix!r} were written by a newer vixio "
                f"(layout {version}, this vixio knows up to {LAYOUT_VERSION}); upgrade vixio, or set "
                "another state.prefix"
            )
        self._open = True

    async def close(self) -> None:
        if self._open:
            self._open = False
            await self._link.close()

    async def _call(self, op: Op, *, write: bool) -> Any:
        if not self._open:
            raise StoreError(f"state store {self.location} is not open")
        return await self._link.call(op, write=write)

    def _script(self, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Op:
        return self._link.script(getattr(scripts, name), keys, args)

    # --- who is let in ------------------------------------------------------------------------

    async def admission(self, device_id: str) -> Admission | None:
        value = await self._call(lambda r: r.hget(self.prefix + "admissions", device_id), write=False)
        if value is None:
            return None
        via, at = json.loads(value)
        return Admission(device_id, via, at)

    async def admit(self, device_id: str, via: AdmissionKind) -> None:
        value = json.dumps([via, time.time()])
        await self._call(lambda r: r.hsetnx(self.prefix + "admissions", device_id, value), write=True)

    async def revoke(self, device_id: str) -> bool:
        return bool(await self._call(lambda r: r.hdel(self.prefix + "admissions", device_id), write=True))

    async def admissions(self) -> list[Admission]:
        entries = await self._call(lambda r: r.hgetall(self.prefix + "admissions"), write=False)
        admitted = [Admission(device, *json.loads(value)) for device, value in entries.items()]
        return sorted(admitted, key=lambda a: (a.at, a.device_id))

    # --- profiles -----------------------------------------------------------------------------

    async def assigned_profile(self, device_id: str) -> str | None:
        value = await self._call(lambda r: r.hget(self.prefix + "profiles", device_id), write=False)
        return None if value is None else str(json.loads(value)[0])

    async def assign_profile(self, device_id: str, profile: str | None) -> None:
        key = self.prefix + "profiles"
        if profile is None:
            await self._call(lambda r: r.hdel(key, device_id), write=True)
            return
        value = json.dumps([profile, time.time()])
        await self._call(lambda r: r.hset(key, device_id, value), write=True)

    async def _prune(self, glob: str, script: str, before: float, keys_of: Callable[[str], Sequence[str]]) -> int:
        pattern = _glob_escape(self.prefix) + glob
        cursor, removed = 0, 0
        while True:

            def scan(r: Any, at: int = cursor) -> Any:
                return r.scan(at, match=pattern, count=PRUNE_BATCH)

            cursor, found = await self._call(scan, write=False)
            keys = [key for name in found for key in keys_of(name)]
            if keys:
                removed += int(await self._call(self._script(script, keys, [repr(before)]), write=True))
            if int(cursor) == 0:
                return removed

    # --- results held for a device that is away ----------------------------------------------

    async def hold_result(self, device_id: str, payload: str, until: float, keep: int) -> None:
        item = json.dumps([payload, until], ensure_ascii=False)
        await self._call(
            self._script("HOLD_RESULT", [f"{self.prefix}held:{device_id}"], [item, repr(until), max(1, keep)]),
            write=True,
        )

    async def take_results(self, device_id: str) -> list[str]:
        return list(
            await self._call(
                self._script("TAKE_RESULTS", [f"{self.prefix}held:{device_id}"], [repr(time.time())]), write=True
            )
        )

    async def prune_results(self, before: float) -> int:
        return await self._prune("held:*", "PRUNE_RESULTS", before, lambda key: (key,))

    # --- limits shared by every process --------------------------------------------------------

    async def count_event(self, key: str, window: float) -> int:
        op = self._script("COUNT_EVENT", [f"{self.prefix}events:{key}"], [max(1, int(window * 1000))])
        return int(await self._call(op, write=True))

    # --- companion pairing --------------------------------------------------------------------

    async def approve_pairing(self, device_id: str, companion: str, client_id: str = "") -> None:
        field = json.dumps([device_id, companion, client_id], ensure_ascii=False)
        await self._call(lambda r: r.hsetnx(self.prefix + "pairings", field, repr(time.time())), write=True)

    async def revoke_pairing(self, device_id: str, companion: str, client_id: str = "") -> bool:
        field = json.dumps([device_id, companion, client_id], ensure_ascii=False)
        return bool(await self._call(lambda r: r.hdel(self.prefix + "pairings", field), write=True))

    async def pairings(self, device_id: str | None = None) -> list[PairingApproval]:
        entries = await self._call(lambda r: r.hgetall(self.prefix + "pairings"), write=False)
        approvals = [
            PairingApproval(device, companion, client, at=float(at))
            for (device, companion, client), at in ((json.loads(field), at) for field, at in entries.items())
        ]
        if device_id is not None:
            approvals = [a for a in approvals if a.device_id == device_id]
        return sorted(approvals, key=lambda a: (a.at, a.device_id, a.companion, a.client_id))


def _glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
