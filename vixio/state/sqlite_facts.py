"""The SQLite store's facts (vixio/state/facts.py): table `facts`, one row per (device, person, key).

Every write is an erase (`erase=True`): the WAL is checkpointed and truncated after it, so a
deleted or replaced value leaves every file at once (vixio/state/sqlite_thread.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from vixio.state.facts import Fact, FactKey, FactStore

_COLUMNS = "device_id, person, key, kind, value, at, source"


class SqliteFacts(FactStore):
    """`FactStore` for `SqliteStore` (which supplies `_call`)."""

    _call: Callable[..., Awaitable[Any]]
    """SqliteStore's: runs a job on the store thread."""

    async def facts(self, device_id: str, person: str | None = None) -> list[Fact]:
        query = f"SELECT {_COLUMNS} FROM facts WHERE device_id = ?"
        arguments: tuple[str, ...] = (device_id,)
        if person is not None:
            query, arguments = query + " AND person = ?", (device_id, person)
        rows = await self._call(
            lambda c: c.execute(query + " ORDER BY at, person, key", arguments).fetchall(), write=False
        )
        return [Fact(*row) for row in rows]

    async def put_facts(self, device_id: str, facts: Sequence[Fact], drop: Sequence[FactKey] = ()) -> None:
        now = time.time()
        rows = [(device_id, f.person, f.key, f.kind, f.value, f.at, f.source, now) for f in facts]
        dropped = [(device_id, person, key) for person, key in drop]

        def put(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM facts WHERE device_id = ? AND person = ? AND key = ?", dropped)
            c.executemany(
                f"INSERT INTO facts ({_COLUMNS}, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (device_id, person, key) DO UPDATE SET kind = excluded.kind, "
                "value = excluded.value, at = excluded.at, source = excluded.source, "
                "updated = excluded.updated",
                rows,
            )

        # An erase: a replaced value (Alice -> Alicia, tea -> coffee) must not linger in the WAL. Facts
        # change a few times a conversation, so the checkpoint's few ms are spent rarely.
        await self._call(put, write=True, erase=True)

    async def delete_facts(self, device_id: str, keys: Sequence[FactKey]) -> int:
        rows = [(device_id, person, key) for person, key in keys]

        def delete(c: sqlite3.Connection) -> int:
            return sum(
                c.execute("DELETE FROM facts WHERE device_id = ? AND person = ? AND key = ?", row).rowcount
                for row in rows
            )

        return int(await self._call(delete, write=True, erase=True))

    async def forget_facts(self, device_id: str, person: str | None = None) -> int:
        if person is None:
            return int(
                await self._call(
                    lambda c: c.execute("DELETE FROM facts WHERE device_id = ?", (device_id,)).rowcount,
                    write=True,
                    erase=True,
                )
            )
        return int(
            await self._call(
                lambda c: (
                    c.execute("DELETE FROM facts WHERE device_id = ? AND person = ?", (device_id, person)).rowcount
                ),
                write=True,
                erase=True,
            )
        )
