"""The store contract runs against every backend: add a backend's factory to BACKENDS."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from vixio.state.sqlite import SqliteStore
from vixio.state.store import Store

StoreFactory = Callable[[], Awaitable[Store]]
"""Opens another client of the same store (another worker process would see the same data)."""


def _sqlite(tmp_path: Path) -> Callable[[], Store]:
    return lambda: SqliteStore(tmp_path / "data" / "state.db", lock_timeout=2.0)


BACKENDS = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
async def open_client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    make = BACKENDS[request.param](tmp_path)
    opened: list[Store] = []

    async def open_one() -> Store:
        store = make()
        await store.open()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_client: StoreFactory) -> Store:
    return await open_client()
