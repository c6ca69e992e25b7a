"""Only the user vixio runs as may read the state (vixio/state/sqlite_files.py), on real files:
a new store's folder is 0700 and its database, -wal and -shm files 0600 under a permissive
umask; files and a folder of vixio's own left open by an older vixio are tightened; a shared
folder and a file of another user are left alone with one WARNING each."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from vixio.state.sqlite import SqliteStore
from vixio.state.store import StoredTurn

pytestmark = pytest.mark.unit

DEVICE = "aa:bb:cc:dd:ee:ff"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask of a careless service (0022, as most systems set it)."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="WARNING", filter="vixio.state")
    try:
        yield lines
    finally:
        logger.remove(sink)


async def test_a_new_store_is_private_while_it_is_written(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "home" / ".vixio" / "state.db"
    store = SqliteStore(path)
    await store.open()
    try:
        await store.put_turn(DEVICE, StoredTurn("c1", 0, "my bank PIN is 1234", "I will remember."))
        await store.set_memory(DEVICE, "The user's PIN is 1234.")
        assert mode(path.parent) == 0o700
        files = [path, path.with_name("state.db-wal"), path.with_name("state.db-shm")]
        assert all(file.exists() for file in files)
        assert {file.name: mode(file) for file in files} == {file.name: 0o600 for file in files}
    finally:
        await store.close()


async def test_an_older_vixios_open_files_and_folder_are_tightened(
    tmp_path: Path, open_umask: None, warnings: list[str]
) -> None:
    folder = tmp_path / ".vixio"
    path = folder / "state.db"
    store = SqliteStore(path)
    await store.open()
    await store.set_memory(DEVICE, "kept")
    await store.close()
    (folder / "activations.json.imported").write_text("{}")
    folder.chmod(0o755)
    for file in folder.iterdir():
        file.chmod(0o644)
    store = SqliteStore(path)
    await store.open()
    try:
        assert (await store.memory(DEVICE)).text == "kept"
        assert mode(folder) == 0o700
        assert mode(path) == 0o600 and mode(path.with_name("state.db-wal")) == 0o600
    finally:
        await store.close()
    assert warnings == []


async def test_a_shared_folder_and_another_users_file_are_left_with_one_warning_each(
    tmp_path: Path, open_umask: None, warnings: list[str]
) -> None:
    tmp_path.chmod(0o755)
    (tmp_path / "config.yaml").write_text("state: {}\n")  # not only vixio's: the folder keeps its mode
    path = tmp_path / "state.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody's file: vixio does not take it over
    for _ in range(2):
        store = SqliteStore(path)
        try:
            await store.open()
        except Exception:  # noqa: BLE001 - not root: nobody's file cannot be opened at all
            pass
        else:
            await store.close()
    assert mode(tmp_path) == 0o755
    folder_lines = [line for line in warnings if f"state.path's folder {tmp_path} is open" in line]
    assert len(folder_lines) == 1 and "chmod 700" in folder_lines[0]
    if os.geteuid() == 0:
        assert mode(path) == 0o644
        file_lines = [line for line in warnings if f"state file {path} is open to other users" in line]
        assert len(file_lines) == 1 and "another user owns it" in file_lines[0]


def test_a_journal_removed_while_the_files_are_tightened_is_no_error(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Workers opening a new file together: one's transaction removes `-journal` between another's
    look and its chmod (seen as a worker failing to start, test_sqlite's four processes)."""
    from vixio.state import sqlite_files

    path = tmp_path / "state" / "state.db"
    tighten = sqlite_files._tighten

    def vanishing(file: Path, wanted: int, kind: str) -> None:
        if file.name.endswith("-journal"):
            raise FileNotFoundError(2, "No such file or directory", str(file))
        tighten(file, wanted, kind)

    path.parent.mkdir(mode=0o700)
    path.with_name("state.db-journal").write_bytes(b"")  # there when looked at, gone at the chmod
    monkeypatch.setattr(sqlite_files, "_tighten", vanishing)
    sqlite_files.make_private(path)
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
