"""The SQLite store's session directory: tables `live_sessions` and `workers`.

A mixin of `SqliteStore`. A session is listed while its worker's heartbeat is current
(`Store.heartbeat` extends `workers.alive_until`, in the same transaction re-recording the
sessions it carries that the table lost).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vixio.state.store import SESSION_TTL, LiveSession

if TYPE_CHECKING:
    from vixio.state.sqlite_thread import Work


class SqliteSessions:
    """Which sessions are live and on which worker, for `SqliteStore` (which supplies `_call`)."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _call(self, work: Work, *, write: bool, erase: bool = False) -> Any: ...

    async def session_started(self, session: LiveSession) -> None:
        values = (session.session_id, session.device_id, session.worker, session.started)
        now = time.time()

        def work(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT OR REPLACE INTO live_sessions (session_id, device_id, worker, started) VALUES (?, ?, ?, ?)",
                values,
            )
            c.execute(
                "INSERT INTO workers (worker, alive_until) VALUES (?, ?) ON CONFLICT (worker) DO UPDATE "
                "SET alive_until = excluded.alive_until WHERE alive_until < ?",
                (session.worker, now + SESSION_TTL, now),
            )

        await self._call(work, write=True)

    async def heartbeat(self, worker: str, ttl: float = SESSION_TTL, sessions: Sequence[LiveSession] = ()) -> list[str]:
        until = time.time() + ttl
        rows = [(s.session_id, s.device_id, s.worker, s.started) for s in sessions]

        def work(c: sqlite3.Connection) -> list[str]:
            c.execute(
                "INSERT INTO workers (worker, alive_until) VALUES (?, ?) "
                "ON CONFLICT (worker) DO UPDATE SET alive_until = excluded.alive_until",
                (worker, until),
            )
            again = []
            for row in rows:
                if c.execute(
                    "INSERT OR IGNORE INTO live_sessions (session_id, device_id, worker, started) VALUES (?, ?, ?, ?)",
                    row,
                ).rowcount:
                    again.append(row[0])
            return again

        return list(await self._call(work, write=True))

    async def session_ended(self, session_id: str) -> None:
        await self._call(
            lambda c: c.execute("DELETE FROM live_sessions WHERE session_id = ?", (session_id,)), write=True
        )

    async def live_sessions(self, device_id: str | None = None) -> list[LiveSession]:
        query = (
            "SELECT s.session_id, s.device_id, s.worker, s.started FROM live_sessions s "
            "LEFT JOIN workers w ON w.worker = s.worker WHERE (w.alive_until IS NULL OR w.alive_until >= ?)"
        )
        arguments: tuple[float | str, ...] = (time.time(),)
        if device_id is not None:
            query, arguments = query + " AND s.device_id = ?", (*arguments, device_id)
        rows = await self._call(
            lambda c: c.execute(query + " ORDER BY s.started, s.session_id", arguments).fetchall(), write=False
        )
        return [LiveSession(*row) for row in rows]

    async def forget_sessions(self, workers: Sequence[str] | None = None) -> int:
        if workers is None:

            def forget_all(c: sqlite3.Connection) -> int:
                c.execute("DELETE FROM workers")
                return int(c.execute("DELETE FROM live_sessions").rowcount)

            return int(await self._call(forget_all, write=True))
        names = list(workers)
        if not names:
            return 0
        marks = ", ".join("?" * len(names))

        def forget(c: sqlite3.Connection) -> int:
            c.execute(f"DELETE FROM workers WHERE worker IN ({marks})", names)
            return int(c.execute(f"DELETE FROM live_sessions WHERE worker IN ({marks})", names).rowcount)

        return int(await self._call(forget, write=True))
