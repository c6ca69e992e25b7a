"""What "erased" means for the SQLite store: the words are in none of its files, read as bytes
(`state.db`, `-wal`, `-shm`), not merely absent from what a query returns."""

from __future__ import annotations

from pathlib import Path

from vixio.state.store import Store


def store_files(store: Store) -> list[Path]:
    path = Path(store.location)
    return [
        file for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")) if file.exists()
    ]


def occurrences(store: Store, words: str) -> dict[str, int]:
    """How often `words` (UTF-8) occur in each of the store's files."""
    needle = words.encode()
    return {file.name: file.read_bytes().count(needle) for file in store_files(store)}


async def assert_in_no_file(store: Store, words: str) -> None:
    """`words` are in no file of an SQLite store (a Redis store: nothing to read here; docs/privacy.md#redis)."""
    if not Path(store.location).exists():
        return
    found = {name: count for name, count in occurrences(store, words).items() if count}
    assert not found, f"{words!r} still in {found}"
