"""The SQLite store's identity pins and pending re-binds: tables `identity_pins` and `rebind_requests`.

A mixin of `SqliteStore`. A pin records which client id a device id proved on first contact
(`Store.pin_identity`); a re-bind request is a different client id claiming a pinned device,
kept for an operator (bounded per device and in total). Re-pinning or unpinning drops the
device's pending requests in the same transaction.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any

from vixio.state.store import PIN_SEEN_EVERY, IdentityPin, RebindRequest

if TYPE_CHECKING:
    from vixio.state.sqlite_thread import Work


class SqliteIdentity:
    """Who each device is, for `SqliteStore` (which supplies `_call`)."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _call(self, work: Work, *, write: bool, erase: bool = False) -> Any: ...

    async def pin_identity(self, device_id: str, client_id: str) -> IdentityPin:
        now = time.time()

        def pin(c: sqlite3.Connection) -> tuple[Any, ...]:
            c.execute(
                "INSERT INTO identity_pins (device_id, client_id, at, seen) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (device_id) DO UPDATE SET seen = excluded.seen "
                "WHERE client_id = excluded.client_id AND seen <= ?",
                (device_id, client_id, now, now, now - PIN_SEEN_EVERY),
            )
            return tuple(
                c.execute(
                    "SELECT device_id, client_id, at, seen FROM identity_pins WHERE device_id = ?", (device_id,)
                ).fetchone()
            )

        return IdentityPin(*await self._call(pin, write=True))

    async def identity_pin(self, device_id: str) -> IdentityPin | None:
        row = await self._call(
            lambda c: c.execute(
                "SELECT device_id, client_id, at, seen FROM identity_pins WHERE device_id = ?", (device_id,)
            ).fetchone(),
            write=False,
        )
        return None if row is None else IdentityPin(*row)

    async def repin_identity(self, device_id: str, client_id: str) -> None:
        now = time.time()

        def repin(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT OR REPLACE INTO identity_pins (device_id, client_id, at, seen) VALUES (?, ?, ?, ?)",
                (device_id, client_id, now, now),
            )
            c.execute("DELETE FROM rebind_requests WHERE device_id = ?", (device_id,))

        await self._call(repin, write=True)

    async def unpin_identity(self, device_id: str) -> bool:
        def unpin(c: sqlite3.Connection) -> bool:
            c.execute("DELETE FROM rebind_requests WHERE device_id = ?", (device_id,))
            return bool(c.execute("DELETE FROM identity_pins WHERE device_id = ?", (device_id,)).rowcount)

        return bool(await self._call(unpin, write=True))

    async def request_rebind(self, device_id: str, client_id: str, per_device: int, total: int) -> None:
        now = time.time()

        def request(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO rebind_requests (device_id, client_id, first, last, attempts) VALUES (?, ?, ?, ?, 1) "
                "ON CONFLICT (device_id, client_id) DO UPDATE SET last = excluded.last, attempts = attempts + 1",
                (device_id, client_id, now, now),
            )
            c.execute(
                "DELETE FROM rebind_requests WHERE device_id = ? AND client_id NOT IN (SELECT client_id FROM "
                "rebind_requests WHERE device_id = ? ORDER BY last DESC, client_id LIMIT ?)",
                (device_id, device_id, max(1, per_device)),
            )
            c.execute(
                "DELETE FROM rebind_requests WHERE (device_id, client_id) NOT IN (SELECT device_id, client_id "
                "FROM rebind_requests ORDER BY last DESC, device_id, client_id LIMIT ?)",
                (max(1, total),),
            )

        await self._call(request, write=True)

    async def rebind_requests(self, device_id: str | None = None) -> list[RebindRequest]:
        query = "SELECT device_id, client_id, first, last, attempts FROM rebind_requests"
        arguments: tuple[str, ...] = ()
        if device_id is not None:
            query, arguments = query + " WHERE device_id = ?", (device_id,)
        rows = await self._call(
            lambda c: c.execute(query + " ORDER BY last DESC, device_id, client_id", arguments).fetchall(), write=False
        )
        return [RebindRequest(*row) for row in rows]

    async def dismiss_rebind(self, device_id: str, client_id: str) -> bool:
        return bool(
            await self._call(
                lambda c: (
                    c.execute(
                        "DELETE FROM rebind_requests WHERE device_id = ? AND client_id = ?", (device_id, client_id)
                    ).rowcount
                ),
                write=True,
            )
        )
