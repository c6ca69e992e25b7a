"""The SQLite store's reminders, fired occurrences and `notify` clips (`ReminderStore`).

A mixin of `SqliteStore`: each method is one job on the store thread, so the claim
(`fire_reminder`: an UPDATE or DELETE conditioned on the due time read, then the occurrence
inserted) runs inside one `BEGIN IMMEDIATE` transaction, which every worker process takes in turn;
so does `claim_fired` (a fired occurrence's `claimed_until`, migration 10, marks who says it).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vixio.state.reminders import FiredReminder, Reminder
from vixio.state.sqlite_thread import Work

_COLUMNS = "id, device_id, text, due, kind, repeat, at, zone, created"
_FIRED = "occurrence, device_id, reminder_id, text, kind, due, zone"


class SqliteReminders:
    """`ReminderStore` on the SQLite file (schema migration 7, vixio/state/sqlite_schema.py)."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _call(self, work: Work, *, write: bool) -> Any: ...

    async def put_reminder(self, reminder: Reminder, per_device: int) -> bool:
        r = reminder

        def put(c: sqlite3.Connection) -> bool:
            others = c.execute(
                "SELECT COUNT(*) FROM reminders WHERE device_id = ? AND id != ?", (r.device_id, r.id)
            ).fetchone()[0]
            if others >= per_device:
                return False
            c.execute(
                f"INSERT OR REPLACE INTO reminders ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.id, r.device_id, r.text, r.due, r.kind, r.repeat, r.at, r.zone, r.created),
            )
            return True

        return bool(await self._call(put, write=True))

    async def reminders(self, device_id: str | None = None, limit: int = 1000) -> list[Reminder]:
        where, arguments = ("WHERE device_id = ? ", (device_id, limit)) if device_id is not None else ("", (limit,))
        rows = await self._call(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reminders {where}ORDER BY due, id LIMIT ?", arguments
            ).fetchall(),
            write=False,
        )
        return [Reminder(*row) for row in rows]

    async def cancel_reminder(self, device_id: str, reminder_id: str) -> bool:
        return bool(
            await self._call(
                lambda c: (
                    c.execute("DELETE FROM reminders WHERE device_id = ? AND id = ?", (device_id, reminder_id)).rowcount
                ),
                write=True,
            )
        )

    async def next_reminder_due(self) -> float | None:
        row = await self._call(lambda c: c.execute("SELECT MIN(due) FROM reminders").fetchone(), write=False)
        return None if row is None or row[0] is None else float(row[0])

    async def due_reminders(self, now: float, limit: int) -> list[Reminder]:
        rows = await self._call(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM reminders WHERE due <= ? ORDER BY due, id LIMIT ?", (now, limit)
            ).fetchall(),
            write=False,
        )
        return [Reminder(*row) for row in rows]

    async def fire_reminder(self, reminder: Reminder, next_due: float | None, keep: int) -> bool:
        r, fired = reminder, reminder.fired()

        def fire(c: sqlite3.Connection) -> bool:
            if next_due is None:
                claimed = c.execute("DELETE FROM reminders WHERE id = ? AND due = ?", (r.id, r.due)).rowcount
            else:
                claimed = c.execute(
                    "UPDATE reminders SET due = ? WHERE id = ? AND due = ?", (next_due, r.id, r.due)
                ).rowcount
            if not claimed:
                return False
            c.execute(
                "INSERT OR REPLACE INTO fired_reminders (occurrence, device_id, reminder_id, text, kind, due, "
                "zone) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (fired.occurrence, r.device_id, r.id, r.text, r.kind, r.due, r.zone),
            )
            c.execute(
                "DELETE FROM fired_reminders WHERE device_id = ? AND occurrence NOT IN (SELECT occurrence "
                "FROM fired_reminders WHERE device_id = ? ORDER BY due DESC LIMIT ?)",
                (r.device_id, r.device_id, max(1, keep)),
            )
            return True

        return bool(await self._call(fire, write=True))

    async def claim_fired(
        self, device_id: str, now: float, until: float, occurrence: str | None = None, limit: int = 16
    ) -> list[FiredReminder]:
        where, arguments = "device_id = ? AND claimed_until <= ?", [device_id, now]
        if occurrence is not None:
            where, arguments = where + " AND occurrence = ?", [*arguments, occurrence]

        def claim(c: sqlite3.Connection) -> list[FiredReminder]:
            rows = c.execute(
                f"SELECT {_FIRED} FROM fired_reminders WHERE {where} ORDER BY due, occurrence LIMIT ?",
                [*arguments, max(1, limit)],
            ).fetchall()
            c.executemany(
                "UPDATE fired_reminders SET claimed_until = ? WHERE occurrence = ?", [(until, row[0]) for row in rows]
            )
            return [FiredReminder(*row) for row in rows]

        return list(await self._call(claim, write=True))

    async def settle_fired(self, device_id: str, occurrences: Sequence[str], delivered: bool) -> None:
        if not occurrences:
            return
        statement = (
            "DELETE FROM fired_reminders WHERE device_id = ? AND occurrence = ?"
            if delivered
            else "UPDATE fired_reminders SET claimed_until = 0 WHERE device_id = ? AND occurrence = ?"
        )
        rows = [(device_id, occurrence) for occurrence in occurrences]
        await self._call(lambda c: c.executemany(statement, rows), write=True)

    async def take_fired(self, device_id: str, occurrence: str | None = None) -> list[FiredReminder]:
        where, arguments = "device_id = ?", [device_id]
        if occurrence is not None:
            where, arguments = where + " AND occurrence = ?", [device_id, occurrence]

        def take(c: sqlite3.Connection) -> list[FiredReminder]:
            rows = c.execute(
                f"SELECT {_FIRED} FROM fired_reminders WHERE {where} ORDER BY due, occurrence",
                arguments,
            ).fetchall()
            c.execute(f"DELETE FROM fired_reminders WHERE {where}", arguments)
            return [FiredReminder(*row) for row in rows]

        return list(await self._call(take, write=True))

    async def put_clip(self, token: str, data: bytes, until: float, keep: int) -> None:
        now = time.time()

        def put(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM clips WHERE until <= ?", (now,))
            c.execute("INSERT OR REPLACE INTO clips (token, data, until) VALUES (?, ?, ?)", (token, data, until))
            c.execute(
                "DELETE FROM clips WHERE token NOT IN (SELECT token FROM clips ORDER BY until DESC LIMIT ?)",
                (max(1, keep),),
            )

        await self._call(put, write=True)

    async def clip(self, token: str) -> bytes | None:
        row = await self._call(
            lambda c: c.execute(
                "SELECT data FROM clips WHERE token = ? AND until > ?", (token, time.time())
            ).fetchone(),
            write=False,
        )
        return None if row is None else bytes(row[0])
