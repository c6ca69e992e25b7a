"""The SQLite store: one file (`state.path`) shared by every worker process.

The queries of `Store`: here admissions, profiles, held results, shared limits and pairings; one
mixin per topic for the rest (sqlite_history.py: turns and memory; sqlite_identity.py: pins and
re-binds; sqlite_sessions.py: the session directory; sqlite_facts.py, sqlite_reminders.py,
sqlite_voiceprints.py). vixio/state/sqlite_thread.py runs them on the one thread per process that
owns the connection (batched transactions, WAL, how failures are reported).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from vixio.state.sqlite_claims import SqliteClaims
from vixio.state.sqlite_facts import SqliteFacts
from vixio.state.sqlite_history import SqliteHistory
from vixio.state.sqlite_identity import SqliteIdentity
from vixio.state.sqlite_reminders import SqliteReminders
from vixio.state.sqlite_sessions import SqliteSessions
from vixio.state.sqlite_thread import SqliteThread, Work
from vixio.state.sqlite_voiceprints import SqliteVoiceprints
from vixio.state.store import Admission, AdmissionKind, PairingApproval, Store


class SqliteStore(
    SqliteClaims, SqliteHistory, SqliteIdentity, SqliteSessions, SqliteFacts, SqliteReminders, SqliteVoiceprints, Store
):
    """`Store` on an SQLite file (see vixio/state/sqlite_thread.py for threads, batches and failures)."""

    def __init__(self, path: str | Path, *, lock_timeout: float = 5.0, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._thread = SqliteThread(self.path, lock_timeout=lock_timeout, max_bytes=max_bytes)

    async def open(self) -> None:
        await self._thread.open()

    async def close(self) -> None:
        await self._thread.close()

    @property
    def busiest_batch_cpu(self) -> float:
        """The most CPU seconds the store thread spent on one batch of queued calls."""
        return self._thread.busiest_batch_cpu

    @property
    def checkpoints(self) -> list[float]:
        """Seconds each erase's WAL checkpoint took (the latest 100)."""
        return self._thread.checkpoints

    async def _call(self, work: Work, *, write: bool, erase: bool = False) -> Any:
        return await self._thread.call(work, write=write, erase=erase)

    # --- who is let in ------------------------------------------------------------------------

    async def admission(self, device_id: str) -> Admission | None:
        row = await self._call(
            lambda c: c.execute(
                "SELECT device_id, via, at FROM admissions WHERE device_id = ?", (device_id,)
            ).fetchone(),
            write=False,
        )
        return None if row is None else Admission(row[0], row[1], row[2])

    async def admit(self, device_id: str, via: AdmissionKind) -> None:
        at = time.time()
        await self._call(
            lambda c: c.execute(
                "INSERT INTO admissions (device_id, via, at) VALUES (?, ?, ?) ON CONFLICT (device_id) DO NOTHING",
                (device_id, via, at),
            ),
            write=True,
        )

    async def revoke(self, device_id: str) -> bool:
        return bool(
            await self._call(
                lambda c: c.execute("DELETE FROM admissions WHERE device_id = ?", (device_id,)).rowcount, write=True
            )
        )

    async def admissions(self) -> list[Admission]:
        rows = await self._call(
            lambda c: c.execute("SELECT device_id, via, at FROM admissions ORDER BY at, device_id").fetchall(),
            write=False,
        )
        return [Admission(*row) for row in rows]

    # --- profiles -----------------------------------------------------------------------------

    async def assigned_profile(self, device_id: str) -> str | None:
        row = await self._call(
            lambda c: c.execute("SELECT profile FROM profile_assignments WHERE device_id = ?", (device_id,)).fetchone(),
            write=False,
        )
        return None if row is None else str(row[0])

    async def assign_profile(self, device_id: str, profile: str | None) -> None:
        at = time.time()
        if profile is None:
            await self._call(
                lambda c: c.execute("DELETE FROM profile_assignments WHERE device_id = ?", (device_id,)), write=True
            )
            return
        await self._call(
            lambda c: c.execute(
                "INSERT INTO profile_assignments (device_id, profile, at) VALUES (?, ?, ?) "
                "ON CONFLICT (device_id) DO UPDATE SET profile = excluded.profile, at = excluded.at",
                (device_id, profile, at),
            ),
            write=True,
        )

    # --- results held for a device that is away ----------------------------------------------

    async def hold_result(self, device_id: str, payload: str, until: float, keep: int) -> None:
        at = time.time()

        def hold(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO held_results (device_id, payload, at, until) VALUES (?, ?, ?, ?)",
                (device_id, payload, at, until),
            )
            c.execute(
                "DELETE FROM held_results WHERE device_id = ? AND id NOT IN "
                "(SELECT id FROM held_results WHERE device_id = ? ORDER BY id DESC LIMIT ?)",
                (device_id, device_id, max(0, keep)),
            )

        await self._call(hold, write=True)

    async def take_results(self, device_id: str) -> list[str]:
        now = time.time()

        def take(c: sqlite3.Connection) -> list[str]:
            rows = c.execute(
                "SELECT payload FROM held_results WHERE device_id = ? AND until > ? ORDER BY id", (device_id, now)
            ).fetchall()
            c.execute("DELETE FROM held_results WHERE device_id = ?", (device_id,))
            return [str(row[0]) for row in rows]

        return list(await self._call(take, write=True))

    async def prune_results(self, before: float) -> int:
        return int(
            await self._call(
                lambda c: c.execute("DELETE FROM held_results WHERE until < ?", (before,)).rowcount, write=True
            )
        )

    # --- limits shared by every process --------------------------------------------------------

    async def count_event(self, key: str, window: float) -> int:
        now = time.time()

        def count(c: sqlite3.Connection) -> int:
            row = c.execute("SELECT ends, count FROM event_windows WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] > now:
                c.execute("UPDATE event_windows SET count = count + 1 WHERE key = ?", (key,))
                return int(row[1]) + 1
            c.execute("DELETE FROM event_windows WHERE ends <= ?", (now,))  # every window that ended
            c.execute("INSERT INTO event_windows (key, ends, count) VALUES (?, ?, 1)", (key, now + window))
            return 1

        return int(await self._call(count, write=True))

    # --- companion pairing --------------------------------------------------------------------

    async def approve_pairing(self, device_id: str, companion: str, client_id: str = "") -> None:
        at = time.time()
        await self._call(
            lambda c: c.execute(
                "INSERT INTO pairings (device_id, companion, client_id, at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (device_id, companion, client_id) DO NOTHING",
                (device_id, companion, client_id, at),
            ),
            write=True,
        )

    async def revoke_pairing(self, device_id: str, companion: str, client_id: str = "") -> bool:
        return bool(
            await self._call(
                lambda c: (
                    c.execute(
                        "DELETE FROM pairings WHERE device_id = ? AND companion = ? AND client_id = ?",
                        (device_id, companion, client_id),
                    ).rowcount
                ),
                write=True,
            )
        )

    async def pairings(self, device_id: str | None = None) -> list[PairingApproval]:
        query = "SELECT device_id, companion, client_id, at FROM pairings"
        arguments: tuple[str, ...] = ()
        if device_id is not None:
            query, arguments = query + " WHERE device_id = ?", (device_id,)
        rows = await self._call(
            lambda c: c.execute(query + " ORDER BY at, device_id, companion, client_id", arguments).fetchall(),
            write=False,
        )
        return [PairingApproval(*row) for row in rows]
