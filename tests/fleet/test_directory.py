"""The live-session directory in one process (vixio/fleet/directory.py): a real server, real
WebSockets, the real SQLite store (and a real redis-server where Redis forgets it). Two
processes are in tests/fleet/test_directory_workers.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.core.pipeline import Pipeline
from vixio.fleet.directory import COMPANION, REPLACED, holder_name, resolve_instance
from vixio.state.store import LiveSession
from vixio.testing.device import SimulatedDevice
from vixio.testing.redis_server import FLEET_SECRET, RedisServer
from vixio.testing.register_client import RegisterClient
from vixio.testing.serve import until
from vixio.transports.xiaozhi.websocket.transport import DeviceContext

pytestmark = pytest.mark.process

MAC = "aa:bb:cc:00:00:01"


@pytest.fixture
async def server() -> AsyncIterator[VixioServer]:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "idle_timeout": 0, "http": {"host": "127.0.0.1", "port": 0}},
            "server": {"directory_ttl": 3},
        }
    )

    async def factory(context: DeviceContext) -> Pipeline:
        return Pipeline([], session_id=context.session_id)

    server = VixioServer(config, factory)
    await server.start()
    yield server
    await server.stop()


def device(server: VixioServer, device_id: str = MAC) -> SimulatedDevice:
    return SimulatedDevice(ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/", device_id=device_id, mcp=False)


async def listed(server: VixioServer, device_id: str | None = None) -> list[tuple[str, str]]:
    return [(s.session_id, s.worker) for s in await server.store.live_sessions(device_id)]


async def test_a_session_is_listed_while_it_lives(server: VixioServer) -> None:
    async with device(server) as first, device(server, "aa:bb:cc:00:00:02") as second:
        await first.connect()
        await second.connect()
        expected = sorted([(first.session_id, "w0"), (second.session_id, "w0")])
        await until(lambda: _equal(listed(server), expected), 10, "both sessions in the directory")
        await first.close()
        await until(lambda: _equal(listed(server), [(second.session_id, "w0")]), 10, "the first to leave it")
    await until(lambda: _equal(listed(server), []), 10, "the directory to be empty")


async def test_a_device_that_connects_again_closes_its_stale_session(server: VixioServer) -> None:
    async with device(server) as stale, device(server) as fresh:
        await stale.connect()
        await until(lambda: listed(server, MAC), 10, "the first session in the directory")
        await fresh.connect()  # the device reconnected; its old connection is still open
        await until(lambda: _true(stale.close_code == 1000), 10, "the stale session to be closed")
        assert stale.protocol.close_reason == REPLACED
        assert fresh.connected
        await until(lambda: _equal(listed(server, MAC), [(fresh.session_id, "w0")]), 10, "only the new session listed")
        assert list(server.transport.connections) == [fresh.session_id]


ROBOT_CLIENT = "5f0c8e21-77aa-4f19-8d42-0c9d7e6b5a41"
"""One companion's Client-Id: another would make the second connection another device (identity.py)."""


async def test_two_connections_of_one_companion_both_stay(server: VixioServer) -> None:
    url = f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"
    async with RegisterClient(url, device_id="robot-1", client_id=ROBOT_CLIENT) as first:
        assert (await first.register(mac_addr=MAC))["result"]["pairing"] == "pending_approval"
        second = RegisterClient(url, device_id="robot-1", client_id=ROBOT_CLIENT)  # the same companion again
        await second.connect()  # says hello first: a device until it registers, but the first is a companion
        assert (await second.register(mac_addr=MAC))["result"]["pairing"] == "pending_approval"
        await until(lambda: _true(len(server.transport.connections) == 2), 10, "both companions served")
        await until(lambda: _two(listed(server, "robot-1")), 10, "both listed")
        await asyncio.sleep(0.5)
        assert len(server.transport.connections) == 2
        await second.close()


async def _two(value: Any) -> bool:
    return len(await value) == 2


async def test_a_session_listed_on_another_holder_that_started_later_is_left_alone(server: VixioServer) -> None:
    # Another instance's session of this device that started after ours: ours is the stale one, not theirs.
    await server.store.session_started(LiveSession("theirs", MAC, "other/w0", time.time() + 60))
    async with device(server) as ours:
        await ours.connect()
        await asyncio.sleep(0.5)
        assert ours.connected
        assert [s for _, s in await listed(server, MAC)] == ["w0", "other/w0"]


async def test_a_killed_holder_leaves_the_directory_after_its_ttl(server: VixioServer) -> None:
    await server.store.session_started(LiveSession("ghost", "aa:bb:cc:00:00:09", "killed/w0", time.time()))
    await server.store.heartbeat("killed/w0", ttl=1.0)  # then nothing: it was killed
    assert ("ghost", "killed/w0") in await listed(server)
    await until(lambda: _false(listed(server)), 5, "the killed holder's session to expire")
    # This process goes on beating (every ttl / 3): its sessions stay.
    async with device(server) as alive:
        await alive.connect()
        await asyncio.sleep(3.5)  # longer than directory_ttl
        assert await listed(server) == [(alive.session_id, "w0")]


def test_holder_names() -> None:
    assert holder_name("", 1) == "w1" and holder_name("host-2", 0) == "host-2/w0"
    assert resolve_instance(None, fleet=False) == "" and resolve_instance("eu-1", fleet=False) == "eu-1"
    assert resolve_instance(None, fleet=True)  # the host name


async def _equal(value: Any, expected: Any) -> bool:
    return sorted(await value) == sorted(expected)


async def _true(value: bool) -> bool:
    return value


async def _false(value: Any) -> bool:
    return not await value


async def test_a_listed_companion_is_found_by_its_device_and_is_no_holder_of_it(server: VixioServer) -> None:
    directory = server.directory
    await directory.list_companion(MAC, "companion-here")
    # A companion of the same device waiting on another instance.
    await server.store.session_started(LiveSession(COMPANION + "companion-there", MAC, "other/w0", time.time()))
    assert sorted(await directory.companion_holders(MAC)) == ["other/w0", "w0"]
    assert await directory.companion_holders("aa:bb:cc:00:00:09") == []
    assert await directory.holders_of(MAC) == []
    async with device(server) as dev:
        await dev.connect()
        await until(lambda: _equal(directory.holders_of(MAC), ["w0"]), 10, "the device in the directory")
        assert dev.connected
    directory.unlist_companion("companion-here")
    await until(lambda: _equal(directory.companion_holders(MAC), ["other/w0"]), 10, "this worker's listing to go")


async def test_a_session_listed_again_closes_itself_when_its_device_connected_elsewhere_meanwhile(
    redis: RedisServer,
) -> None:
    """The store forgot the directory (a Redis restarted empty). The device connected to another
    instance meanwhile, which could not close this session: it was not listed yet, or the fleet's
    bus was still reconnecting. This process's heartbeats check what they listed again: this
    session is the stale one and closes."""
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "idle_timeout": 0, "http": {"host": "127.0.0.1", "port": 0}},
            "server": {"directory_ttl": 3, "instance": "a"},
            "state": {"backend": "redis", "url": redis.url, "prefix": "split:", "fleet_secret": FLEET_SECRET},
        }
    )

    async def factory(context: DeviceContext) -> Pipeline:
        return Pipeline([], session_id=context.session_id)

    server = VixioServer(config, factory, worker_index=0)
    await server.start()
    try:
        async with device(server) as ours, device(server, "aa:bb:cc:00:00:02") as other:
            await ours.connect()
            await other.connect()
            await until(
                lambda: _equal(listed(server), [(ours.session_id, "a/w0"), (other.session_id, "a/w0")]),
                10,
                "both sessions listed",
            )
            await asyncio.to_thread(redis.restart)  # empty
            await until(
                lambda: _equal(listed(server), [(ours.session_id, "a/w0"), (other.session_id, "a/w0")]),
                10,
                "the heartbeat to list both again",
            )
            # Then the device connects to instance b, whose call to close this session fails.
            await server.store.session_started(LiveSession("on-b", MAC, "b/w0", time.time()))
            await server.store.heartbeat("b/w0", ttl=30)
            await until(lambda: _true(ours.close_code == 1000), 10, "the heartbeat to close our stale session")
            assert ours.protocol.close_reason == REPLACED and other.connected
            await until(
                lambda: _equal(listed(server), [("on-b", "b/w0"), (other.session_id, "a/w0")]),
                10,
                "the other device listed again, this one only on b",
            )
    finally:
        await server.stop()
