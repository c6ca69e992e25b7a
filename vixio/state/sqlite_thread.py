"""The SQLite store's thread: one per process owns the connection and runs the jobs queued to it.

Calls queue a job and await its future, so the event loop never waits on the file; the thread
takes every job queued meanwhile and runs them in one transaction (100 devices finishing turns at
once cost about one commit, not 100). WAL mode lets the other workers read while one writes;
`synchronous=NORMAL` keeps commits off fsync (a power cut may lose the last moments, never the
file).

Erasing really erases: `secure_delete` makes SQLite overwrite deleted rows with zeros in the
pages it writes, and a batch holding an erase (`call(..., erase=True)`) is followed by
`wal_checkpoint(TRUNCATE)`, so the pages that still held the words (the earlier versions in the
WAL) are copied over and the WAL is emptied: afterwards the words are in neither `state.db` nor
its `-wal` (the `-shm` index holds page numbers, never rows). Without it "Alice" stayed in the
WAL for ~195 turns, and in `state.db` after pruning on a build that does not zero freed pages.
A checkpoint costs a few ms (bench/bench_memory_quality.py measures it); another process
reading at that moment makes it wait (its busy handler, `lock_timeout`); one that could not
finish is logged and retried after the next erase.

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
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from vixio.core.thread_names import name_this_thread
from vixio.state.sqlite_files import make_private
from vixio.state.sqlite_schema import NewerSchemaError, migrate
from vixio.state.store import StoreError, StoreWriteError

Work = Callable[[sqlite3.Connection], Any]

MAX_BATCH = 512
"""Jobs run in one transaction at most (bounds how long one commit holds the write lock)."""


@dataclass(slots=True)
class _Job:
    work: Work
    write: bool
    future: asyncio.Future[Any]
    erase: bool = False


class SqliteThread:
    """The connection to one file and the thread that owns it."""

    def __init__(self, path: Path, *, lock_timeout: float, max_bytes: int | None) -> None:
        self.path = path
        self.location = str(path)
        self._lock_timeout = lock_timeout
        self._max_bytes = max_bytes
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failing = False
        """A write failed and no write has worked since (the ERROR is logged once per episode)."""
        self.checkpoints: list[float] = []
        """Seconds each erase's checkpoint took (the latest 100), for benchmarks."""
        self.busiest_batch_cpu = 0.0
        """The most CPU seconds the thread spent on one batch (bounds how long it could hold the
        GIL from the event loop; the SQL itself runs without it)."""

    async def open(self) -> None:
        if self._thread is not None:
            return
        try:
            await asyncio.to_thread(make_private, self.path)  # folder 0700, file 0600 (sqlite_files.py)
        except OSError as exc:
            raise StoreError(
                f"state.path {self.path}: cannot create its folder or the file ({exc.strerror or exc}); "
                "point state.path to a writable place"
            ) from exc
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

    async def call(self, work: Work, *, write: bool, erase: bool = False) -> Any:
        """Run `work(connection)` on the thread (in a transaction when `write`); its result. With
        `erase` the WAL is checkpointed and truncated once it committed (see the module docstring)."""
        if self._thread is None:
            raise StoreError(f"state store {self.location} is not open")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._jobs.put(_Job(work, write, future, erase))
        return await future

    def _connect(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(
                self.path, timeout=self._lock_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(self._describe(exc)) from exc
        try:
            mode = self._switch_to_wal(connection)
            if mode.lower() != "wal":
                raise StoreError(
                    f"state.path {self.path}: SQLite cannot use WAL mode there (journal mode {mode}); "
                    "put state.path on a local disk"
                )
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA secure_delete = ON")  # deleted rows are zeroed, not left in free space
            if self._max_bytes is not None:
                page = int(connection.execute("PRAGMA page_size").fetchone()[0])
                connection.execute(f"PRAGMA max_page_count = {max(16, self._max_bytes // page)}")
            migrate(connection, self.location)
        except NewerSchemaError as exc:
            connection.close()
            raise StoreError(
                f"state.path {self.path}: written by a newer vixio ({exc}); upgrade vixio, "
                "or point state.path to another file"
            ) from None
        except sqlite3.Error as exc:
            connection.close()
            raise StoreError(self._describe(exc)) from exc
        except BaseException:
            connection.close()
            raise
        return connection

    def _switch_to_wal(self, connection: sqlite3.Connection) -> str:
        """`PRAGMA journal_mode = WAL`, again until `lock_timeout` while the file is locked: when
        several processes open a new file together, SQLite answers "database is locked" at once
        to the one whose lock would deadlock with another's, without waiting in its busy handler."""
        deadline = time.monotonic() + self._lock_timeout
        while True:
            try:
                return str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)  # on the store's own thread

    def _describe(self, exc: sqlite3.Error) -> str:
        """What went wrong with the file, and what the operator can do about it."""
        text = str(exc)
        where = f"state.path {self.path}"
        if "locked" in text or "busy" in text:
            return (
                f"{where}: locked by another process for more than {self._lock_timeout:g} s (state.lock_timeout): "
                "close whatever holds it (a sqlite3 shell, a backup tool, another vixio with other settings) "
                "or point state.path to another file"
            )
        if "full" in text:
            cap = f" or the state.max_mb cap ({self._max_bytes / 2**20:g} MB)" if self._max_bytes else ""
            return f"{where}: the disk{cap} is full ({text}); free space there, or raise state.max_mb"
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return (
                f"{where}: not a usable vixio state file ({text}); stop vixio and move the file aside "
                "(a new empty one is made at the next start) or restore it from a backup"
            )
        if "readonly" in text or "unable to open" in text or "permission" in text.lower():
            return f"{where}: cannot be opened for writing ({text}); check its permissions and its folder's"
        return f"{where}: {type(exc).__name__}: {text}"

    def _serve(self, ready: asyncio.Future[None]) -> None:
        name_this_thread("vixio-store")
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
                started = time.thread_time()
                _settle(self._run(connection, batch))
                self.busiest_batch_cpu = max(self.busiest_batch_cpu, time.thread_time() - started)
        finally:
            connection.close()

    def _run(
        self, connection: sqlite3.Connection, batch: list[_Job]
    ) -> list[tuple[asyncio.Future[Any], Any, BaseException | None]]:
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
        if any(job.erase for job in batch):
            self._checkpoint(connection)
        return [(job.future, result, None) for job, result in zip(batch, results, strict=True)]

    def _checkpoint(self, connection: sqlite3.Connection) -> None:
        """Copy the WAL into the file and truncate it: the erased words leave the WAL now."""
        started = time.perf_counter()
        try:
            busy = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error as exc:
            logger.warning(
                "state store {}: the WAL was not emptied after an erase ({}); erased words stay in "
                "{}-wal until the next erase or checkpoint",
                self.location,
                exc,
                self.path.name,
            )
            return
        self.checkpoints = [*self.checkpoints[-99:], time.perf_counter() - started]
        if busy:
            logger.warning(
                "state store {}: another process kept reading through the checkpoint after an erase "
                "(for more than state.lock_timeout); erased words stay in {}-wal until the next erase",
                self.location,
                self.path.name,
            )

    def _failure(self, job: _Job, exc: Exception) -> BaseException:
        if not isinstance(exc, sqlite3.Error):
            return exc  # a bug in the job itself: its caller sees it as it is
        message = self._describe(exc)
        if not job.write:
            return StoreError(message)
        if not self._failing:
            self._failing = True
            logger.error(
                "{}; what is not stored now is lost, the conversations go on (one line until writes work again)",
                message,
            )
        return StoreWriteError(message)


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
