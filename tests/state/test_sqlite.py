"""What only the SQLite backend does: its file, its migrations, its thread, its failures."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from loguru import logger

from vixio.state.sqlite import SqliteStore
from vixio.state.sqlite_schema import SCHEMA_VERSION
from vixio.state.store import StoredTurn, StoreError, StoreWriteError

pytestmark = pytest.mark.process

DEVICE = "aa:bb:cc:dd:ee:ff"


def capture(level: str = "INFO") -> tuple[list[str], int]:
    lines: list[str] = []
    sink = logger.add(
        lambda message: lines.append(f"{message.record['level'].name} {message.record['message']}"),
        level=level,
        filter="vixio.state",
    )
    return lines, sink


async def test_first_open_makes_the_folder_and_a_wal_file_at_the_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "state.db"
    store = SqliteStore(path)
    await store.open()
    await store.admit(DEVICE, via="activation")
    await store.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("SELECT device_id, via FROM admissions").fetchall() == [(DEVICE, "activation")]


async def test_a_file_that_is_not_a_database_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not SQLite at all" * 100)
    with pytest.raises(StoreError, match=r"state.path .*state.db: not a usable vixio state file .*move the file aside"):
        await SqliteStore(path).open()


async def test_a_file_from_a_newer_vixio_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"written by a newer vixio .*schema version {SCHEMA_VERSION + 1}"):
        await SqliteStore(path).open()


async def test_a_locked_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE held (x)")
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"state.path .*state.db: locked by another process for more than 0.3 s"):
            await SqliteStore(path, lock_timeout=0.3).open()
        assert time.monotonic() - started < 5
    finally:
        holder.close()
    store = SqliteStore(path)  # released: it opens
    await store.open()
    await store.close()


async def test_a_full_disk_loses_the_new_writes_logs_one_error_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path, max_bytes=256 * 1024)  # what a full disk does, at a size a test reaches
    await store.open()
    lines, sink = capture()
    try:
        await store.admit(DEVICE, via="activation")
        await store.put_turn(DEVICE, StoredTurn("c", 0, "kept", "yes", at=time.time()))
        failed = 0
        for seq in range(1, 200):
            try:
                await store.put_turn(DEVICE, StoredTurn("c", seq, "x" * 2000, "y" * 2000, at=time.time() + seq))
            except StoreWriteError as exc:
                failed += 1
                assert "state.db: the disk or the state.max_mb cap (0.25 MB) is full" in str(exc)
        assert failed > 100
        # Reads work, earlier data is intact, and the operator got one line, not one per write.
        assert await store.admission(DEVICE) is not None
        turns = await store.recent_turns(DEVICE, limit=500)
        assert turns[0].user == "kept" and len(turns) == 200 - failed
        errors = [line for line in lines if line.startswith("ERROR")]
        assert len(errors) == 1 and "the conversations go on" in errors[0]
        # Space again (history erased): writes work and say so once.
        await store.clear_history(DEVICE)
        await store.put_turn(DEVICE, StoredTurn("c", 999, "back", "again", at=time.time()))
        assert [t.user for t in await store.recent_turns(DEVICE, limit=5)] == ["back"]
        assert sum(line.startswith("INFO") and "writes work again" in line for line in lines) == 1
    finally:
        logger.remove(sink)
        await store.close()


async def test_a_failing_write_takes_no_other_write_of_its_batch_with_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db", max_bytes=256 * 1024)
    await store.open()
    try:
        small = [
            store.put_turn(f"02:00:00:00:00:{n:02x}", StoredTurn("c", 0, "hi", "ok", at=time.time())) for n in range(20)
        ]
        huge = store.put_turn(DEVICE, StoredTurn("c", 0, "x" * 400_000, "y", at=time.time()))
        outcomes = await asyncio.gather(*small[:10], huge, *small[10:], return_exceptions=True)
        assert isinstance(outcomes[10], StoreWriteError)
        assert [o for n, o in enumerate(outcomes) if n != 10] == [None] * 20
        assert len(await store.recent_turns("02:00:00:00:00:13", limit=5)) == 1
    finally:
        await store.close()


async def test_another_process_writes_and_this_one_reads(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    await store.open()
    script = (
        "import asyncio, time, sys\n"
        "from vixio.state.sqlite import SqliteStore\n"
        "from vixio.state.store import StoredTurn\n"
        "async def main():\n"
        "    s = SqliteStore(sys.argv[1]); await s.open()\n"
        "    await asyncio.gather(*(s.put_turn('aa:bb:cc:dd:ee:ff', StoredTurn('c', n, f'q{n}', 'a', at=time.time() + n))"
        " for n in range(50)))\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    try:
        writer = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(path))
        concurrent = [
            store.put_turn("02:00:00:00:00:01", StoredTurn("c", n, "mine", "a", at=time.time())) for n in range(50)
        ]
        await asyncio.gather(*concurrent)
        assert await writer.wait() == 0
        assert len(await store.recent_turns(DEVICE, limit=100)) == 50
        assert len(await store.recent_turns("02:00:00:00:00:01", limit=100)) == 50
    finally:
        await store.close()


async def test_calls_before_open_or_after_close_say_so(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    with pytest.raises(StoreError, match="is not open"):
        await store.admission(DEVICE)
    await store.open()
    await store.close()
    with pytest.raises(StoreError, match="is not open"):
        await store.memory(DEVICE)


def test_an_unwritable_folder_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create its folder"):
        asyncio.run(SqliteStore(blocker / "sub" / "state.db").open())


def test_migrations_run_once_when_workers_start_together(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    script = (
        "import asyncio, sys\nfrom vixio.state.sqlite import SqliteStore\n"
        "async def main():\n    s = SqliteStore(sys.argv[1]); await s.open(); await s.close()\n"
        "asyncio.run(main())\n"
    )
    processes = [subprocess.Popen([sys.executable, "-c", script, str(path)]) for _ in range(4)]
    assert [p.wait(timeout=60) for p in processes] == [0, 0, 0, 0]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_opening_waits_out_a_lock_that_sqlite_reports_at_once(tmp_path: Path) -> None:
    # Switching to WAL under another connection's write answers "database is locked" at once,
    # whatever the busy timeout (as when workers open a new file together): the store retries.
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE other_tool (x)")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO other_tool VALUES (1)")
    release = threading.Timer(0.4, holder.execute, ("COMMIT",))
    release.start()
    try:
        asyncio.run(_open_and_close(SqliteStore(path)))
    finally:
        release.join()
        holder.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def _open_and_close(store: SqliteStore) -> None:
    await store.open()
    await store.close()


async def test_a_version_1_file_is_migrated_keeping_its_rows(tmp_path: Path) -> None:
    from vixio.state.sqlite_schema import MIGRATIONS

    path = tmp_path / "state.db"
    with sqlite3.connect(path) as raw:  # as the first release of the store left it
        for statement in MIGRATIONS[0]:
            raw.execute(statement)
        raw.execute("INSERT INTO pairings VALUES ('aa:bb:cc:dd:ee:ff', 'robot-1', 1.5)")
        raw.execute("INSERT INTO admissions VALUES ('aa:bb:cc:dd:ee:ff', 'activation', 1.0)")
        raw.execute("PRAGMA user_version = 1")
    lines, sink = capture()
    store = SqliteStore(path)
    try:
        await store.open()
        [approval] = await store.pairings(DEVICE)
        assert (approval.companion, approval.client_id, approval.at) == ("robot-1", "", 1.5)
        assert await store.admission(DEVICE) is not None
        assert any(f"schema 1 -> {SCHEMA_VERSION}" in line for line in lines)
    finally:
        logger.remove(sink)
        await store.close()


REAL_DISK_FULL = """
import asyncio, sys, time
from pathlib import Path
from loguru import logger
from vixio.state.sqlite import SqliteStore
from vixio.state.store import StoredTurn, StoreWriteError

logger.remove()
logger.enable("vixio")
logger.add(lambda m: print("LOG", m.record["level"].name, m.record["message"]), level="INFO")


async def main() -> None:
    store = SqliteStore(Path(sys.argv[1]) / "state.db")
    await store.open()
    device = "aa:bb:cc:dd:ee:ff"
    await store.admit(device, via="activation")
    await store.put_turn(device, StoredTurn("c", 0, "kept", "yes", at=time.time()))
    failed = 0
    for seq in range(1, 200):
        try:
            await store.put_turn(device, StoredTurn("c", seq, "x" * 2000, "y" * 2000, at=time.time() + seq))
        except StoreWriteError:
            failed += 1
    turns = await store.recent_turns(device, limit=500)
    print("RESULT", failed, len(turns), turns[0].user, await store.admission(device) is not None)
    await store.close()

asyncio.run(main())
"""


def _can_mount_tmpfs() -> bool:
    import os
    import shutil

    return sys.platform == "linux" and os.geteuid() == 0 and shutil.which("unshare") is not None


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and unshare to mount a small tmpfs")
def test_a_really_full_disk_a_256_kb_tmpfs_is_one_error_and_keeps_the_rest(tmp_path: Path) -> None:
    """ENOSPC from the kernel, not the max_mb cap: a tmpfs of 256 KB mounted in a private mount
    namespace (gone with the process)."""
    mount = tmp_path / "small"
    mount.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(REAL_DISK_FULL, encoding="utf-8")
    result = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=256k tmpfs "{mount}" || exit 77; exec "{sys.executable}" "{script}" "{mount}"',
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode == 77:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    (summary,) = [line.split()[1:] for line in result.stdout.splitlines() if line.startswith("RESULT")]
    failed, stored, first, admitted = int(summary[0]), int(summary[1]), summary[2], summary[3]
    assert failed > 100 and stored == 200 - failed and first == "kept" and admitted == "True"
    errors = [line for line in result.stdout.splitlines() if line.startswith("LOG ERROR")]
    assert len(errors) == 1 and f"state.path {mount / 'state.db'}: the disk is full" in errors[0]
    assert "the conversations go on" in errors[0]
