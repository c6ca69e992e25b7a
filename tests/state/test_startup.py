"""`vixio serve` with a state file it cannot use (damaged, locked by another process, written by a
newer vixio): one line naming the file and what to do, exit 1, before any model loads or worker
starts."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.state.sqlite_schema import SCHEMA_VERSION

pytestmark = pytest.mark.process

WORKERS = [
    "1",
    pytest.param("2", marks=pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")),
]


def serve(tmp_path: Path, workers: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
xiaozhi: {{host: 127.0.0.1, port: 0, http: {{host: 127.0.0.1, port: 0}}}}
state: {{path: {tmp_path / "state.db"}, lock_timeout: 0.5}}
""",
        encoding="utf-8",
    )
    return subprocess.run(
        [sys.executable, "-m", "vixio", "serve", "--config", str(config), "--workers", workers],
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextmanager
def damaged(path: Path) -> Iterator[None]:
    path.write_bytes(b"not a database" * 500)
    yield


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process (here a connection of this one) holds the file's exclusive lock."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE held (x)")
    try:
        yield
    finally:
        holder.close()


@contextmanager
def newer(path: Path) -> Iterator[None]:
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    yield


CASES: dict[str, tuple[Callable[[Path], object], str]] = {
    "damaged": (
        damaged,
        "not a usable vixio state file (file is not a database); stop vixio and move the file "
        "aside (a new empty one is made at the next start) or restore it from a backup",
    ),
    "locked": (locked, "locked by another process for more than 0.5 s (state.lock_timeout): close whatever holds it"),
    "newer": (newer, f"written by a newer vixio (schema version {SCHEMA_VERSION + 1}"),
}


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_unusable_state_file_is_one_line_naming_it(tmp_path: Path, case: str, workers: str) -> None:
    make, expected = CASES[case]
    with make(tmp_path / "state.db"):  # type: ignore[attr-defined]
        result = serve(tmp_path, workers)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if "state.path" in line]
    assert len(lines) == 1, result.stderr
    assert f"state.path {tmp_path / 'state.db'}: {expected}" in lines[0], lines[0]
    assert "point state.path to another file" in lines[0] or case == "damaged"
    assert "Traceback" not in result.stderr and "starting 2 workers" not in result.stderr
