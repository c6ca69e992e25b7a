"""Who may read the SQLite state file: only the user vixio runs as.

The file holds transcripts, long-term memory, pairings and activations, so before SQLite opens it
its folder is created 0700 and the file 0600. SQLite gives its `-wal` and `-shm` files the mode of
the database file, so they follow. A file that exists with a looser mode is tightened when this
user owns it; otherwise one WARNING says which file and what to run.

An existing folder is tightened only when it holds nothing but the state file, its companions and
the legacy JSON files vixio kept beside it: a folder shared with other things (`state.path:
state.db` in a project folder) keeps its mode, with one WARNING, since the files in it are 0600
whatever the folder's mode.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from loguru import logger

FILE_MODE = 0o600
FOLDER_MODE = 0o700
COMPANIONS = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside the database, named after it."""
LEGACY_FILES = ("activations.json", "pairings.json")
"""What vixio kept in the state folder before the store (imported, then renamed `.imported`)."""

_warned: set[str] = set()
"""Paths already warned about in this process (one WARNING each)."""


def make_private(path: Path) -> None:
    """Create `path`'s folder (0700) and `path` (0600, empty: SQLite starts a database in it) if
    missing; tighten or warn about what exists. OSError when the folder cannot be created."""
    folder = path.parent
    existed = folder.is_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    if existed:
        _tighten_folder(folder, path.name)
    else:
        _tighten(folder, FOLDER_MODE, "folder")  # mkdir's mode is masked by the umask
    descriptor = os.open(path, os.O_CREAT | os.O_RDWR, FILE_MODE)
    os.close(descriptor)
    for file in [path, *(path.with_name(path.name + suffix) for suffix in COMPANIONS)]:
        # Absent, or a journal another process's transaction removed meanwhile (workers starting together).
        with contextlib.suppress(FileNotFoundError):
            _tighten(file, FILE_MODE, "file")


def _tighten_folder(folder: Path, database: str) -> None:
    mode = stat.S_IMODE(folder.stat().st_mode)
    if not mode & 0o077:
        return
    names = [entry.name for entry in folder.iterdir()]
    ours = all(name.startswith(database) or name.startswith(LEGACY_FILES) for name in names)
    if ours:
        _tighten(folder, FOLDER_MODE, "folder")
    else:
        _warn_once(
            folder,
            f"state.path's folder {folder} is open to other users (mode {mode:04o}) and holds other "
            f"files, so vixio leaves it as it is; the state files in it are {FILE_MODE:04o}. "
            f"Run `chmod 700 {folder}` or give state.path a folder of its own",
        )


def _tighten(path: Path, wanted: int, kind: str) -> None:
    """`chmod` `path` to `wanted` when any group/other bit is set; a WARNING when not allowed."""
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if not mode & 0o077:
        return
    if info.st_uid == os.geteuid():
        try:
            os.chmod(path, wanted)
            return
        except OSError as exc:
            reason = exc.strerror or str(exc)
    else:
        reason = "another user owns it"
    _warn_once(
        path,
        f"state {kind} {path} is open to other users (mode {mode:04o}) and vixio cannot tighten it "
        f"({reason}); run `chmod {wanted:o} {path}` as its owner",
    )


def _warn_once(path: Path, message: str) -> None:
    key = str(path.resolve())
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)
