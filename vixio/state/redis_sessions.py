"""The Redis store's session directory.

Keys (P is `state.prefix`; vixio/state/redis.py lists the others):

    P sessions                   hash  session id -> [device, worker, started]
    P device-sessions:DEVICE     set   the device's session ids
    P workers                    hash  worker -> alive until (ms, the server's clock)

A mixin of `RedisStore`. Sessions are listed while their worker's heartbeat is current
(`Store.heartbeat`); a worker silent for `FORGET_WORKER_AFTER` has its entries deleted when
sessions are next listed. Every call is one script: the scripts reach the session keys they find,
which is why the store needs a standalone Redis/Valkey (or a primary), not Redis Cluster.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vixio.state.store import SESSION_TTL, LiveSession

if TYPE_CHECKING:
    from vixio.state.redis_link import Op

FORGET_WORKER_AFTER = 86400.0
"""A worker silent this long is gone for good: its session entries are deleted."""


class RedisSessions:
    """Which sessions are live and on which worker, for `RedisStore`."""

    prefix: str

    if TYPE_CHECKING:  # RedisStore's

        async def _call(self, op: Op, *, write: bool) -> Any: ...

        def _script(self, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Op: ...

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
