"""Limits counted in the state store (vixio/state/limits.py): a real server, a real SQLite file,
a registerTools client that reconnects to start its count afresh. Across instances on Redis:
tests/fleet/test_fleet.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.core.pipeline import Pipeline
from vixio.state.limits import StoreRate
from vixio.state.store import StoreError
from vixio.testing.register_client import RegisterClient
from vixio.transports.xiaozhi.websocket.transport import DeviceContext

pytestmark = pytest.mark.integration


@pytest.fixture
async def server() -> AsyncIterator[VixioServer]:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "idle_timeout": 0,
                "http": {"host": "127.0.0.1", "port": 0},
                "mcp": {"limits": {"registrations_per_minute": 4}},
            }
        }
    )

    async def factory(context: DeviceContext) -> Pipeline:
        return Pipeline([], session_id=context.session_id)

    server = VixioServer(config, factory)
    await server.start()
    yield server
    await server.stop()


async def test_a_client_that_reconnects_keeps_its_count(server: VixioServer) -> None:
    url = f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"
    async with RegisterClient(url, device_id="robot-9") as first:
        assert all(["result" in await first.register() for _ in range(3)])
    async with RegisterClient(url, device_id="robot-9") as again, RegisterClient(url) as other:
        assert "result" in await again.register()  # the 4th in the minute
        refused = await again.register()
        assert refused["error"]["message"].startswith(
            "registration refused: more than 4 registrations in a minute from robot-9 over all its connections"
        )
        assert "result" in await other.register()  # another device counts on its own


class BrokenStore:
    async def count_event(self, key: str, window: float) -> int:
        raise StoreError("state store redis://…: unreachable")


async def test_a_store_that_fails_lets_registrations_through() -> None:
    rate = StoreRate(BrokenStore(), "register", limit=1)  # type: ignore[arg-type]
    assert [await rate.allow("robot") for _ in range(3)] == [True, True, True]
