"""The Redis store: the state of a whole fleet of vixio instances on one Redis or Valkey server.

    state: {backend: redis, url: "redis://redis.internal:6379/0", password: "${REDIS_PASSWORD}",
            fleet_secret: "${VIXIO_FLEET_SECRET}"}

Keys (P is `state.prefix`, "vixio:" by default, so several fleets can share one server; values
are JSON arrays, times unix seconds):

    P schema                     "1": the layout version (a newer one is refused)
    P admissions                 hash  device -> [via, at]
    P profiles                   hash  device -> [profile, at]
    P memories, P facts:DEVICE   hash  device -> [text, at]; [person, key] -> [kind, value, at, source] (redis_facts.py)
    P pairings                   hash  [device, companion, client_id] -> at
    P turns:DEVICE               zset  "SEQ|CONVERSATION" scored by the turn's start time
    P turn-text:DEVICE           hash  "SEQ|CONVERSATION" -> [conversation, seq, user, assistant, interrupted, at]
    P sessions                   hash  session id -> [device, worker, started]
    P device-sessions:DEVICE     set   the device's session ids
    P devices                    zset  device scored by its newest turn or memory update
    P held:DEVICE                list  [payload, until] of background results held for it
    P workers                    hash  worker -> alive until (ms, the server's clock)
    P events:KEY                 int   events in KEY's current window (Store.count_event; expires with it)
    P pins                       hash  device -> [client_id, at]: who the device is (Store.pin_identity)
    P pins-seen                  hash  device -> when its pinned pair was last seen
    P rebinds                    hash  [device, client_id] -> [first, last, attempts]: re-binds pending
    P rebind-order               zset  the same members scored by their latest attempt (bounds them)
    P reminders:DEVICE, P reminder-due, P fired:DEVICE, P clip:TOKEN, P clips: reminders
                                 (vixio/state/redis_reminders.py)
    P voiceprints:DEVICE         hash  person -> [vector, samples, at] (vixio/state/redis_voiceprints.py)
    P voiceprint-devices         set   the devices that hold voiceprints

Bounds: a device keeps its newest `state.max_turns` turns; its two turn keys expire
`memory.history_days` after its newest turn (the hourly prune also drops older turns of devices
still talking). A turn's texts are bounded by the recorder (vixio/memory/conversation.py), the long-term
memory by `memory.max_chars`, facts by `MAX_FACTS_PER_DEVICE` (what RDB/AOF keep: docs/privacy.md#redis). A device's held results expire with the latest of them (at most
`keep`). `devices` drops a device whose turns expired and memory is gone when it meets it.
Sessions are listed while their worker's heartbeat is current (`Store.heartbeat`); a worker
silent for a day has its entries deleted when sessions are next listed.

Every call is one command, or one Lua script from redis_scripts.py where it must be atomic; calls made at the
same moment share one round trip (redis_link.py: pipelines, and what an outage does). A turn is one call; a
session start's reads share one round trip. Nothing is cached here: every instance reads what another just
wrote. Standalone Redis/Valkey (or a primary), not Redis Cluster: the session scripts reach keys they find.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from vixio.state import redis_scripts as scripts
from vixio.state.redis_claims import RedisClaims
from vixio.state.redis_facts import RedisFacts
from vixio.state.redis_link import Op, RedisLink, unusable
from vixio.state.redis_reminders import RedisReminders
from vixio.state.redis_voiceprints import RedisVoiceprints
from vixio.state.store import (
    PIN_SEEN_EVERY,
    SESSION_TTL,
    Admission,
    AdmissionKind,
    DeviceMemory,
    DeviceRecord,
    IdentityPin,
    LiveSession,
    PairingApproval,
    RebindRequest,
    Store,
    StoredTurn,
    StoreError,
)

LAYOUT_VERSION = 1
FORGET_WORKER_AFTER = 86400.0
"""A worker silent this long is gone for good: its session entries are deleted."""
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


class RedisStore(RedisClaims, RedisFacts, RedisReminders, RedisVoiceprints, Store):
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

    # --- conversation history -----------------------------------------------------------------

    def _turn_keys(self, device_id: str) -> tuple[str, str]:
        return f"{self.prefix}turns:{device_id}", f"{self.prefix}turn-text:{device_id}"

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        # Zero-padded seq first: turns that began at the same time come back in seq order.
        member = f"{turn.seq:010d}|{turn.conversation}"
        value = json.dumps(
            [turn.conversation, turn.seq, turn.user, turn.assistant, turn.interrupted, turn.at], ensure_ascii=False
        )
        await self._call(
            self._script(
                "PUT_TURN",
                [*self._turn_keys(device_id), self.prefix + "devices"],
                [member, repr(turn.at), value, self._max_turns, self._history_ms, device_id],
            ),
            write=True,
        )

    async def recent_turns(self, device_id: str, limit: int) -> list[StoredTurn]:
        if limit <= 0:
            return []
        values = await self._call(self._script("RECENT_TURNS", self._turn_keys(device_id), [limit]), write=False)
        turns = []
        for value in reversed(values):
            if value is None:
                continue
            conversation, seq, user, assistant, interrupted, at = json.loads(value)
            turns.append(StoredTurn(conversation, seq, user, assistant, bool(interrupted), at))
        return turns

    async def clear_history(self, device_id: str) -> int:
        return int(await self._call(self._script("CLEAR_TURNS", self._turn_keys(device_id)), write=True))

    async def delete_turn(self, device_id: str, conversation: str, seq: int) -> bool:
        member = f"{seq:010d}|{conversation}"
        return bool(await self._call(self._script("DELETE_TURN", self._turn_keys(device_id), [member]), write=True))

    async def prune_history(self, before: float) -> int:
        """Walks every device's turn keys (SCAN, one round trip per batch) and trims each batch in one script."""
        return await self._prune(
            "turns:*",
            "PRUNE_TURNS",
            before,
            lambda order: (order, self.prefix + "turn-text:" + order[len(self.prefix) + 6 :]),
        )

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

    async def devices(self, limit: int, offset: int = 0) -> list[DeviceRecord]:
        if limit <= 0:
            return []
        flat = await self._call(
            self._script(
                "DEVICES", [self.prefix + "devices", self.prefix + "memories"], [self.prefix, max(0, offset), limit]
            ),
            write=True,
        )
        records = []
        for i in range(0, len(flat), 6):
            device, turns, newest, memory, updated, facts = flat[i : i + 6]
            text = json.loads(memory)[0] if memory else ""
            records.append(
                DeviceRecord(
                    device, int(turns), float(newest) if newest else None, len(text), float(updated), int(facts)
                )
            )
        return records

    # --- long-term memory ---------------------------------------------------------------------

    async def memory(self, device_id: str) -> DeviceMemory | None:
        value = await self._call(lambda r: r.hget(self.prefix + "memories", device_id), write=False)
        if value is None:
            return None
        text, at = json.loads(value)
        return DeviceMemory(text, at)

    async def set_memory(self, device_id: str, text: str) -> None:
        key = self.prefix + "memories"
        if not text:
            await self._call(lambda r: r.hdel(key, device_id), write=True)
            return
        at = time.time()
        value = json.dumps([text, at], ensure_ascii=False)
        await self._call(
            self._script("SET_MEMORY", [key, self.prefix + "devices"], [device_id, value, repr(at)]), write=True
        )

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

    # --- who each device is ---------------------------------------------------------------------

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

    # --- live sessions ------------------------------------------------------------------------

    async def session_started(self, session: LiveSession) -> None:
        value = json.dumps([session.device_id, session.worker, session.started], ensure_ascii=False)
        keys = [self.prefix + "sessions", f"{self.prefix}device-sessions:{session.device_id}", self.prefix + "workers"]
        await self._call(
            self._script(
                "SESSION_STARTED",
                keys,
                [session.session_id, value, session.worker, int(SESSION_TTL * 1000), self.prefix, session.device_id],
            ),
            write=True,
        )

    async def heartbeat(self, worker: str, ttl: float = SESSION_TTL, sessions: Sequence[LiveSession] = ()) -> list[str]:
        args: list[Any] = [worker, int(ttl * 1000), self.prefix]
        for s in sessions:
            args += [s.session_id, json.dumps([s.device_id, s.worker, s.started], ensure_ascii=False), s.device_id]
        keys = [self.prefix + "workers", self.prefix + "sessions"]
        return list(await self._call(self._script("HEARTBEAT", keys, args), write=True) or [])

    async def session_ended(self, session_id: str) -> None:
        await self._call(
            self._script("SESSION_ENDED", [self.prefix + "sessions"], [self.prefix, session_id]), write=True
        )

    async def live_sessions(self, device_id: str | None = None) -> list[LiveSession]:
        keys = [self.prefix + "sessions", self.prefix + "workers"]
        if device_id is not None:
            keys.append(f"{self.prefix}device-sessions:{device_id}")
        flat = await self._call(
            self._script("LIVE_SESSIONS", keys, [self.prefix, int(FORGET_WORKER_AFTER * 1000)]), write=False
        )
        sessions = [LiveSession(flat[i], *json.loads(flat[i + 1])) for i in range(0, len(flat), 2)]
        return sorted(sessions, key=lambda s: (s.started, s.session_id))

    async def forget_sessions(self, workers: Sequence[str] | None = None) -> int:
        if workers is not None and not workers:
            return 0
        keys = [self.prefix + "sessions", self.prefix + "workers"]
        return int(await self._call(self._script("FORGET_SESSIONS", keys, [self.prefix, *(workers or [])]), write=True))


def _rebind_prefix(device_id: str) -> str:
    """How the members of the device's re-binds start (`[device, client]` as JSON)."""
    return json.dumps([device_id], ensure_ascii=False)[:-1] + ", "


def _glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
