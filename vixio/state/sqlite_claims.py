"""The SQLite store's named claims (`ClaimStore`, schema migration 11): one job on the store
thread each, inside its write transaction, so the processes sharing the file take turns."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any

from vixio.state.sqlite_thread import Work


class SqliteClaims:
    """`ClaimStore` on the SQLite file."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _call(self, work: Work, *, write: bool) -> Any: ...

    async def claim(self, name: str, holder: str, ttl: float) -> str:
        now = time.time()

        def claim(c: sqlite3.Connection) -> str:
            c.execute(
                "INSERT INTO claims (name, holder, until) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "holder = excluded.holder, until = excluded.until WHERE claims.holder = excluded.holder "
                "OR claims.until <= ?",
                (name, holder, now + ttl, now),
            )
            return str(c.execute("SELECT holder FROM claims WHERE name = ?", (name,)).fetchone()[0])

        return str(await self._call(claim, write=True))

    async def release(self, name: str, holder: str) -> bool:
        return bool(
            await self._call(
                lambda c: c.execute("DELETE FROM claims WHERE name = ? AND holder = ?", (name, holder)).rowcount,
                write=True,
            )
        )
