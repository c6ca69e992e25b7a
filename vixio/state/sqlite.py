"""The SQLite store: one file (`state.path`) shared by every worker process.

One thread per process owns the connection. Calls queue a job and await its future, so the event
loop never waits on the file; the thread takes every job queued meanwhile and runs them in one
transaction (100 devices finishing turns at once cost about one commit, not 100). WAL mode lets
the other workers read while one writes; `synchronous=NORMAL` keeps commits off fsync (a power
cut may lose the last moments, never the file).

When a batch fails, each of its jobs is run again alone, so one bad write takes no other with
it. A write that still fails (disk full, `state.max_mb` reached) raises `StoreWriteError`; the
first of an episode logs one ERROR naming the file and what to do, the next ones log nothing
until a write works again.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from vixio.state.sqlite_schema import NewerSchemaError, migrate
from vixio.state.store import (
    SESSION_TTL,
    Admission,
    AdmissionKind,
    DeviceMemory,
    LiveSession,
    PairingApproval,
    Store,
    StoreError,
    StoreWriteError,
    StoredTurn,
)

Work = Callable[[sqlite3.Connection], Any]

MAX_BATCH = 512
"""Jobs run in one transaction at most (bounds how long one commit holds the write lock)."""


@dataclass(slots=True)
class _Job:
    work: Work
    write: bool
    future: asyncio.Future[Any]


class SqliteStore(Store):
    """`Store` on an SQLite file (see the module docstring for threads, batches and failures)."""

    def __init__(self, path: str | Path, *, lock_timeout: float = 5.0, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._lock_timeout = lock_timeout
        self._max_bytes = max_bytes
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failing = False
        """A write failed and no write has worked since (the ERROR is logged once per episode)."""

    # --- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._thread is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"state.path {self.path}: cannot create its folder ({exc.strerror or exc}); "
                             "point state.path to a writable place") from exc
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        thread = threading.Thread(target=self._serve, args=(ready,), name="vixio-store", daemon=True)
        thread.start()
        try:
            await ready
        except BaseException:
            await asyncio.to_thread(thread.join)
            raise
        self._thread = thread

    async def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)  # after every job already queued
            await asyncio.to_thread(thread.join)

    def _connect(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, timeout=self._lock_timeout, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(self._describe(exc)) from exc
        try:
            mode = str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            if mode.lower() != "wal":
                raise StoreError(f"state.path {self.path}: SQLite cannot use WAL mode there (journal mode {mode}); "
                                 "put state.path on a local disk")
            connection.execute("PRAGMA synchronous = NORMAL")
            if self._max_bytes is not None:
                page = int(connection.execute("PRAGMA page_size").fetchone()[0])
                connection.execute(f"PRAGMA max_page_count = {max(16, self._max_bytes // page)}")
            migrate(connection, self.location)
        except NewerSchemaError as exc:
            connection.close()
            raise StoreError(f"state.path {self.path}: written by a newer vixio ({exc}); upgrade vixio, "
                             "or point state.path to another file") from None
        except sqlite3.Error as exc:
            connection.close()
            raise StoreError(self._describe(exc)) from exc
        except BaseException:
            connection.close()
            raise
        return connection

    def _describe(self, exc: sqlite3.Error) -> str:
        """What went wrong with the file, and what the operator can do about it."""
        text = str(exc)
        where = f"state.path {self.path}"
        if "locked" in text or "busy" in text:
            return (f"{where}: locked by another process for more than {self._lock_timeout:g} s (state.lock_timeout): "
                    "close whatever holds it (a sqlite3 shell, a backup tool, another vixio with other settings) "
                    "or point state.path to another file")
        if "full" in text:
            cap = f" or the state.max_mb cap ({self._max_bytes / 2**20:g} MB)" if self._max_bytes else ""
            return f"{where}: the disk{cap} is full ({text}); free space there, or raise state.max_mb"
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return (f"{where}: not a usable vixio state file ({text}); stop vixio and move the file aside "
                    "(a new empty one is made at the next start) or restore it from a backup")
        if "readonly" in text or "unable to open" in text or "permission" in text.lower():
            return f"{where}: cannot be opened for writing ({text}); check its permissions and its folder's"
        return f"{where}: {type(exc).__name__}: {text}"

    # --- the store thread ---------------------------------------------------------------------

    def _serve(self, ready: asyncio.Future[None]) -> None:
        try:
            connection = self._connect()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting open()
            _settle([(ready, None, exc)])
            return
        _settle([(ready, None, None)])
        try:
            stop = False
            while not stop:
                job = self._jobs.get()
                if job is None:
                    break
                batch = [job]
                while len(batch) < MAX_BATCH:
                    try:
                        queued = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if queued is None:
                        stop = True
                        break
                    batch.append(queued)
                _settle(self._run(connection, batch))
        finally:
            connection.close()

    def _run(self, connection: sqlite3.Connection, batch: list[_Job]) -> list[tuple[asyncio.Future[Any], Any, BaseException | None]]:
        writes = any(job.write for job in batch)
        try:
            if writes:
                connection.execute("BEGIN IMMEDIATE")
            results = [job.work(connection) for job in batch]
            if writes:
                connection.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - becomes each job's own outcome below
            if connection.in_transaction:
                with suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
            if len(batch) > 1:
                return [outcome for job in batch for outcome in self._run(connection, [job])]
            return [(batch[0].future, None, self._failure(batch[0], exc))]
        if writes and self._failing:
            self._failing = False
            logger.info("state store {}: writes work again", self.location)
        return [(job.future, result, None) for job, result in zip(batch, results, strict=True)]

    def _failure(self, job: _Job, exc: Exception) -> BaseException:
        if not isinstance(exc, sqlite3.Error):
            return exc  # a bug in the job itself: its caller sees it as it is
        message = self._describe(exc)
        if not job.write:
            return StoreError(message)
        if not self._failing:
            self._failing = True
            logger.error("{}; what is not stored now is lost, the conversations go on "
                         "(one line until writes work again)", message)
        return StoreWriteError(message)

    async def _call(self, work: Work, *, write: bool) -> Any:
        if self._thread is None:
            raise StoreError(f"state store {self.location} is not open")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._jobs.put(_Job(work, write, future))
        return await future

    # --- who is let in ------------------------------------------------------------------------

    async def admission(self, device_id: str) -> Admission | None:
        row = await self._call(lambda c: c.execute(
            "SELECT device_id, via, at FROM admissions WHERE device_id = ?", (device_id,)).fetchone(), write=False)
        return None if row is None else Admission(row[0], row[1], row[2])

    async def admit(self, device_id: str, via: AdmissionKind) -> None:
        at = time.time()
        await self._call(lambda c: c.execute(
            "INSERT INTO admissions (device_id, via, at) VALUES (?, ?, ?) ON CONFLICT (device_id) DO NOTHING",
            (device_id, via, at)), write=True)

    async def revoke(self, device_id: str) -> bool:
        return bool(await self._call(lambda c: c.execute(
            "DELETE FROM admissions WHERE device_id = ?", (device_id,)).rowcount, write=True))

    async def admissions(self) -> list[Admission]:
        rows = await self._call(lambda c: c.execute(
            "SELECT device_id, via, at FROM admissions ORDER BY at, device_id").fetchall(), write=False)
        return [Admission(*row) for row in rows]

    # --- profiles -----------------------------------------------------------------------------

    async def assigned_profile(self, device_id: str) -> str | None:
        row = await self._call(lambda c: c.execute(
            "SELECT profile FROM profile_assignments WHERE device_id = ?", (device_id,)).fetchone(), write=False)
        return None if row is None else str(row[0])

    async def assign_profile(self, device_id: str, profile: str | None) -> None:
        at = time.time()
        if profile is None:
            await self._call(lambda c: c.execute(
                "DELETE FROM profile_assignments WHERE device_id = ?", (device_id,)), write=True)
            return
        await self._call(lambda c: c.execute(
            "INSERT INTO profile_assignments (device_id, profile, at) VALUES (?, ?, ?) "
            "ON CONFLICT (device_id) DO UPDATE SET profile = excluded.profile, at = excluded.at",
            (device_id, profile, at)), write=True)

    # --- conversation history -----------------------------------------------------------------

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        values = (device_id, turn.conversation, turn.seq, turn.user, turn.assistant, int(turn.interrupted), turn.at)
        await self._call(lambda c: c.execute(
            "INSERT INTO turns (device_id, conversation, seq, user_text, assistant_text, interrupted, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (device_id, conversation, seq) DO UPDATE SET "
            "user_text = excluded.user_text, assistant_text = excluded.assistant_text, "
            "interrupted = excluded.interrupted, at = excluded.at", values), write=True)

    async def recent_turns(self, device_id: str, limit: int) -> list[StoredTurn]:
        rows = await self._call(lambda c: c.execute(
            "SELECT conversation, seq, user_text, assistant_text, interrupted, at FROM turns "
            "WHERE device_id = ? ORDER BY at DESC, seq DESC LIMIT ?", (device_id, limit)).fetchall(), write=False)
        return [StoredTurn(row[0], row[1], row[2], row[3], bool(row[4]), row[5]) for row in reversed(rows)]

    async def clear_history(self, device_id: str) -> int:
        return int(await self._call(lambda c: c.execute(
            "DELETE FROM turns WHERE device_id = ?", (device_id,)).rowcount, write=True))

    async def prune_history(self, before: float) -> int:
        return int(await self._call(lambda c: c.execute(
            "DELETE FROM turns WHERE at < ?", (before,)).rowcount, write=True))

    # --- long-term memory ---------------------------------------------------------------------

    async def memory(self, device_id: str) -> DeviceMemory | None:
        row = await self._call(lambda c: c.execute(
            "SELECT text, at FROM memories WHERE device_id = ?", (device_id,)).fetchone(), write=False)
        return None if row is None else DeviceMemory(row[0], row[1])

    async def set_memory(self, device_id: str, text: str) -> None:
        at = time.time()
        if not text:
            await self._call(lambda c: c.execute("DELETE FROM memories WHERE device_id = ?", (device_id,)), write=True)
            return
        await self._call(lambda c: c.execute(
            "INSERT INTO memories (device_id, text, at) VALUES (?, ?, ?) "
            "ON CONFLICT (device_id) DO UPDATE SET text = excluded.text, at = excluded.at",
            (device_id, text, at)), write=True)

    # --- companion pairing --------------------------------------------------------------------

    async def approve_pairing(self, device_id: str, companion: str, client_id: str = "") -> None:
        at = time.time()
        await self._call(lambda c: c.execute(
            "INSERT INTO pairings (device_id, companion, client_id, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (device_id, companion, client_id) DO NOTHING", (device_id, companion, client_id, at)),
            write=True)

    async def revoke_pairing(self, device_id: str, companion: str, client_id: str = "") -> bool:
        return bool(await self._call(lambda c: c.execute(
            "DELETE FROM pairings WHERE device_id = ? AND companion = ? AND client_id = ?",
            (device_id, companion, client_id)).rowcount, write=True))

    async def pairings(self, device_id: str | None = None) -> list[PairingApproval]:
        query = "SELECT device_id, companion, client_id, at FROM pairings"
        arguments: tuple[str, ...] = ()
        if device_id is not None:
            query, arguments = query + " WHERE device_id = ?", (device_id,)
        rows = await self._call(lambda c: c.execute(query + " ORDER BY at, device_id, companion, client_id",
                                                    arguments).fetchall(), write=False)
        return [PairingApproval(*row) for row in rows]

    # --- live sessions ------------------------------------------------------------------------

    async def session_started(self, session: LiveSession) -> None:
        values = (session.session_id, session.device_id, session.worker, session.started)
        now = time.time()

        def work(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO live_sessions (session_id, device_id, worker, started) "
                      "VALUES (?, ?, ?, ?)", values)
            c.execute("INSERT INTO workers (worker, alive_until) VALUES (?, ?) ON CONFLICT (worker) DO UPDATE "
                      "SET alive_until = excluded.alive_until WHERE alive_until < ?",
                      (session.worker, now + SESSION_TTL, now))

        await self._call(work, write=True)

    async def heartbeat(self, worker: str, ttl: float = SESSION_TTL) -> None:
        until = time.time() + ttl
        await self._call(lambda c: c.execute(
            "INSERT INTO workers (worker, alive_until) VALUES (?, ?) "
            "ON CONFLICT (worker) DO UPDATE SET alive_until = excluded.alive_until", (worker, until)), write=True)

    async def session_ended(self, session_id: str) -> None:
        await self._call(lambda c: c.execute(
            "DELETE FROM live_sessions WHERE session_id = ?", (session_id,)), write=True)

    async def live_sessions(self, device_id: str | None = None) -> list[LiveSession]:
        query = ("SELECT s.session_id, s.device_id, s.worker, s.started FROM live_sessions s "
                 "LEFT JOIN workers w ON w.worker = s.worker WHERE (w.alive_until IS NULL OR w.alive_until >= ?)")
        arguments: tuple[float | str, ...] = (time.time(),)
        if device_id is not None:
            query, arguments = query + " AND s.device_id = ?", (*arguments, device_id)
        rows = await self._call(lambda c: c.execute(query + " ORDER BY s.started, s.session_id", arguments).fetchall(),
                                write=False)
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


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """Hand results to the loops that wait for them: one wake-up per loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, mine in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, mine)
        except RuntimeError:  # that loop is closed: nobody waits any more
            continue


def _resolve(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        if future.done():  # the caller was cancelled; the work is done all the same
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
