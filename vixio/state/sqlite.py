"""The SQLite store: one file (`state.path`) shared by every worker process.

The queries of `Store` (its facts: vixio/state/sqlite_facts.py); vixio/state/sqlite_thread.py runs them on the one thread per process that
owns the connection (batched transactions, WAL, how failures are reported).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vixio.state.sqlite_claims import SqliteClaims
from vixio.state.sqlite_facts import SqliteFacts
from vixio.state.sqlite_reminders import SqliteReminders
from vixio.state.sqlite_thread import SqliteThread, Work
from vixio.state.sqlite_voiceprints import SqliteVoiceprints
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
)


class SqliteStore(SqliteClaims, SqliteFacts, SqliteReminders, SqliteVoiceprints, Store):
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

    # --- conversation history -----------------------------------------------------------------

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        values = (device_id, turn.conversation, turn.seq, turn.user, turn.assistant, int(turn.interrupted), turn.at)
        await self._call(
            lambda c: c.execute(
                "INSERT INTO turns (device_id, conversation, seq, user_text, assistant_text, interrupted, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (device_id, conversation, seq) DO UPDATE SET "
                "user_text = excluded.user_text, assistant_text = excluded.assistant_text, "
                "interrupted = excluded.interrupted, at = excluded.at",
                values,
            ),
            write=True,
        )

    async def recent_turns(self, device_id: str, limit: int) -> list[StoredTurn]:
        rows = await self._call(
            lambda c: c.execute(
                "SELECT conversation, seq, user_text, assistant_text, interrupted, at FROM turns "
                "WHERE device_id = ? ORDER BY at DESC, seq DESC LIMIT ?",
                (device_id, limit),
            ).fetchall(),
            write=False,
        )
        return [StoredTurn(row[0], row[1], row[2], row[3], bool(row[4]), row[5]) for row in reversed(rows)]

    async def clear_history(self, device_id: str) -> int:
        return int(
            await self._call(
                lambda c: c.execute("DELETE FROM turns WHERE device_id = ?", (device_id,)).rowcount,
                write=True,
                erase=True,
            )
        )

    async def delete_turn(self, device_id: str, conversation: str, seq: int) -> bool:
        return bool(
            await self._call(
                lambda c: (
                    c.execute(
                        "DELETE FROM turns WHERE device_id = ? AND conversation = ? AND seq = ?",
                        (device_id, conversation, seq),
                    ).rowcount
                ),
                write=True,
                erase=True,
            )
        )

    async def prune_history(self, before: float) -> int:
        return int(
            await self._call(
                lambda c: c.execute("DELETE FROM turns WHERE at < ?", (before,)).rowcount, write=True, erase=True
            )
        )

    async def devices(self, limit: int, offset: int = 0) -> list[DeviceRecord]:
        rows = await self._call(
            lambda c: c.execute(
                "SELECT device_id, SUM(turns), MAX(last_turn), SUM(memory_chars), MAX(updated), SUM(facts) FROM ("
                " SELECT device_id, COUNT(*) AS turns, MAX(at) AS last_turn, 0 AS memory_chars, MAX(at) AS updated,"
                " 0 AS facts"
                " FROM turns GROUP BY device_id"
                " UNION ALL SELECT device_id, 0, NULL, LENGTH(text), at, 0 FROM memories"
                " UNION ALL SELECT device_id, 0, NULL, 0, MAX(updated), COUNT(*) FROM facts GROUP BY device_id"
                ") GROUP BY device_id ORDER BY MAX(updated) DESC, device_id LIMIT ? OFFSET ?",
                (max(0, limit), max(0, offset)),
            ).fetchall(),
            write=False,
        )
        return [DeviceRecord(row[0], int(row[1]), row[2], int(row[3]), row[4], int(row[5])) for row in rows]

    # --- long-term memory ---------------------------------------------------------------------

    async def memory(self, device_id: str) -> DeviceMemory | None:
        row = await self._call(
            lambda c: c.execute("SELECT text, at FROM memories WHERE device_id = ?", (device_id,)).fetchone(),
            write=False,
        )
        return None if row is None else DeviceMemory(row[0], row[1])

    async def set_memory(self, device_id: str, text: str) -> None:
        at = time.time()
        if not text:
            await self._call(
                lambda c: c.execute("DELETE FROM memories WHERE device_id = ?", (device_id,)), write=True, erase=True
            )
            return
        await self._call(
            lambda c: c.execute(
                "INSERT INTO memories (device_id, text, at) VALUES (?, ?, ?) "
                "ON CONFLICT (device_id) DO UPDATE SET text = excluded.text, at = excluded.at",
                (device_id, text, at),
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

    # --- who each device is ---------------------------------------------------------------------

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

    # --- live sessions ------------------------------------------------------------------------

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
