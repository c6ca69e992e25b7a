"""The store contract runs against every backend: SQLite on a file in the test's folder, and Redis
on a real `redis-server` started once per test session (each test under its own key prefix).
Without the `redis-server` package the Redis cases skip, naming it."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vixio.state.store import Store
from vixio.testing import redis_server
from vixio.testing.redis_server import RedisServer

StoreFactory = Callable[[], Awaitable[Store]]
"""Opens another client of the same store (another worker process would see the same data)."""

BACKENDS = ("redis", "sqlite")
_prefixes = itertools.count()


@pytest.fixture(scope="session")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session's tests (restarted by the tests that stop it)."""
    why = redis_server.missing()
    if why:
        pytest.skip(why)
    server = RedisServer.start(tmp_path_factory.mktemp("redis"))
    yield server
    server.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def state_config(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The `state:` section of a config for this backend, on a store no other test sees."""
    if backend == "sqlite":
        return {"path": str(tmp_path / "data" / "state.db"), "lock_timeout": 2.0}
    server: RedisServer = request.getfixturevalue("redis")
    if not server.running:  # a test stopped it and failed before starting it again
        server.restart()
    return {
        "backend": "redis",
        "url": server.url,
        "prefix": f"test{next(_prefixes)}:",
        "fleet_secret": redis_server.FLEET_SECRET,
    }


@pytest.fixture
async def open_client(state_config: dict[str, Any]) -> AsyncIterator[StoreFactory]:
    from vixio.config.memory import StateConfig
    from vixio.state import open_store

    config = StateConfig.model_validate(state_config)
    opened: list[Store] = []

    async def open_one() -> Store:
        store = open_store(config)
        await store.open()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_client: StoreFactory) -> Store:
    return await open_client()


@pytest.fixture
def server_gc() -> Iterator[None]:
    """The garbage collector as `vixio serve` runs it (`freeze_startup_heap`): what was loaded
    before is out of its reach, so a full collection walks the test's own objects, not pytest's
    and every imported module's (60-130 ms of loop time otherwise, nothing to do with the store)."""
    import gc

    from vixio.app.startup import freeze_startup_heap

    threshold = gc.get_threshold()
    freeze_startup_heap()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
