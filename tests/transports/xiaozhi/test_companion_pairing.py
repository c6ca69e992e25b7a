"""Seed 002 companions: a registerTools-only client (no hello, no audio) paired by `mac_addr`.

Real server, a simulated Xiaozhi device and a registerTools client on loopback WebSockets. Here
with `xiaozhi.pairing.trust_mac: true` (the registerTools design's trust in the MAC); who may pair by default is
in test_pairing_authorization.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from loguru import logger

from vixio.core.tools.types import ToolDefinition
from vixio.testing.device import SimulatedDevice
from vixio.testing.register_client import RegisterClient
from vixio.transports.xiaozhi.companions.pairing import CompanionRegistry, normalize_mac

from .test_register_tools import Harness, harness, start_harness, until, volume_tools  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"


@pytest.fixture
async def trusting() -> AsyncIterator[Harness]:
    """A server with `pairing.trust_mac: true`; it must say so with a WARNING when it starts."""
    warnings: list[str] = []
    sink = logger.add(lambda message: warnings.append(message.record["message"]), level="WARNING")
    try:
        harness = await start_harness(pairing={"trust_mac": True})
    finally:
        logger.remove(sink)
    assert any("xiaozhi.pairing.trust_mac is on" in line for line in warnings), warnings
    yield harness
    await harness.server.stop()


def device_session(h: Harness, device_id: str = DEVICE) -> str:
    return next(sid for sid, conn in h.server.transport.connections.items() if conn.device_id == device_id)


async def device_tools(h: Harness, session_id: str, names: set[str], timeout: float = 5.0) -> list[ToolDefinition]:
    """The device session's latest tool list, once it has exactly `names`."""

    def latest() -> list[ToolDefinition]:
        seen = h.tools_seen.get(session_id, [])
        return seen[-1] if seen else []

    await until(lambda: {t.name for t in latest()} == names, timeout)
    return latest()


async def ask(device: SimulatedDevice, text: str) -> None:
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=10)


async def test_a_companion_pairs_with_a_connected_device(trusting: Harness) -> None:
    harness = trusting
    async with SimulatedDevice(ws_url=harness.url, device_id=DEVICE, mcp=False, listening_mode="manual") as device:
        await device.connect()
        await until(lambda: any(c.device_id == DEVICE for c in harness.server.transport.connections.values()))
        companion = RegisterClient(harness.url, volume_tools())
        await companion.connect(hello=False)  # registerTools only: no hello, ever
        try:
            reply = await companion.register(mac_addr="AA-BB-CC-DD-EE-FF")
            assert reply["result"]["paired"] is True and "Paired with the device" in reply["result"]["message"]
            assert reply["result"]["pairing"] == "paired"
            sid = device_session(harness)
            tools = await device_tools(harness, sid, {"amplify_volume", "get_weather"})
            # The device session's tools run on the companion's socket.
            result = await next(t for t in tools if t.name == "get_weather").invoke({"city": "Paris"})
            assert result.success and '"weather":"sunny"' in result.text
            assert companion.executions[-1].tool_name == "get_weather"

            # The device's conversation streams to the companion.
            await ask(device, "hello")
            assert await companion.wait_for_ai("final") == "You said: hello. That is all."
            chunks = [m["content"] for m in companion.ai_messages if m["type"] == "chunk"]
            assert "".join(chunks) == "You said: hello. That is all."
            # It was not dropped for lack of a hello, and got a session of its own.
            assert companion.server_hello is None or companion.server_hello["type"] == "hello"
        finally:
            await companion.close()
        # The companion left: its tools leave the device's session.
        await device_tools(harness, sid, set())


async def test_a_companion_waits_unpaired_then_pairs_when_its_device_connects(trusting: Harness) -> None:
    harness = trusting
    companion = RegisterClient(harness.url, volume_tools(), envelope="bare")
    await companion.connect(hello=False)
    try:
        reply = await companion.register(mac_addr="aa-bb-cc-dd-ee-ff")
        assert reply["result"]["paired"] is False and "served on your own" in reply["result"]["message"]
        assert reply["result"]["pairing"] == "waiting_for_device"
        await asyncio.sleep(1.5)  # past the hello grace: it is served, not closed
        await companion.send_text("anyone there?")  # on its own, it talks to its own session
        assert await companion.wait_for_ai("final") == "You said: anyone there?. That is all."

        async with SimulatedDevice(ws_url=harness.url, device_id=DEVICE, mcp=False, listening_mode="manual") as device:
            await device.connect()
            await until(lambda: any(c.device_id == DEVICE for c in harness.server.transport.connections.values()))
            sid = device_session(harness)
            await device_tools(harness, sid, {"amplify_volume", "get_weather"})
            host = harness.server.transport.register_clients[sid]
            own = next(
                s
                for s, c in harness.server.transport.register_clients.items()
                if c is not host and c.mac_addr == "aa-bb-cc-dd-ee-ff"
            )
            assert harness.server.transport.register_clients[own].paired_with == sid
            await ask(device, "hi")
            assert await companion.wait_for_ai("final", count=2) == "You said: hi. That is all."
        # The device left: the companion waits for it again.
        await until(lambda: harness.server.transport.register_clients[own].paired_with == "")
    finally:
        await companion.close()


async def test_main_type_local_maps_to_the_servers_own_tool(harness: Harness) -> None:  # noqa: F811
    async with RegisterClient(harness.url, volume_tools()) as client:
        reply = await client.register(
            tools=[
                {"name": "get_time", "description": "the clock", "main_type": "local"},
                {"name": "fly", "description": "d", "main_type": "local"},
                volume_tools()[0].to_json(),
            ]
        )
        result = reply["result"]
        assert result["tools"] == 2 and result["local"] == ["get_time"]
        assert [(s["name"], "no tool named 'fly'" in s["reason"]) for s in result["skipped"]] == [("fly", True)]
        # Only the client's own (remote) tools join as registerTools tools; get_time is the server's.
        assert [t.name for t in await harness.tools(client)] == ["amplify_volume"]


def test_mac_addresses_compare_without_case_or_separators() -> None:
    assert normalize_mac("AA-BB-CC-DD-EE-FF") == normalize_mac("aa:bb:cc:dd:ee:ff") == "aa:bb:cc:dd:ee:ff"
    assert normalize_mac("aabbccddeeff") == "aa:bb:cc:dd:ee:ff"
    for junk in ("", "anonymous-1234", "aa:bb:cc", "x" * 100, "aa:bb:cc:dd:ee:ff:00"):
        assert normalize_mac(junk) == ""


class _Client:
    def __init__(self, session_id: str, mac: str = "", device_id: str = "") -> None:
        self.session_id, self.mac_addr, self.device_id = session_id, mac, device_id or f"companion-{session_id}"
        self.client_id = ""
        self.is_companion = bool(mac)
        self.paired_with = ""
        self.companions: list[Any] = []

    def attach_companion(self, companion: Any) -> None:
        self.companions.append(companion)

    def detach_companion(self, companion: Any) -> None:
        self.companions.remove(companion)


def test_the_registry_pairs_now_or_later_and_bounds_companions() -> None:
    registry = CompanionRegistry()
    host = _Client("dev", device_id=DEVICE)
    early = _Client("c1", "AA-BB-CC-DD-EE-FF")
    assert registry.companion_registered(early).status == "waiting_for_device"  # type: ignore[arg-type]
    registry.device_connected(DEVICE, host)  # type: ignore[arg-type]
    assert host.companions == [early] and early.paired_with == "dev"
    late = [_Client(f"c{i}", "aabbccddeeff") for i in range(2, 12)]
    outcomes = [registry.companion_registered(c) for c in late]  # type: ignore[arg-type]
    assert [o.paired for o in outcomes].count(True) == 7 and len(host.companions) == 8
    assert outcomes[-1].status == "device_full"
    registry.companion_left(early)  # type: ignore[arg-type]
    assert early not in host.companions and early.paired_with == ""
    registry.device_disconnected(DEVICE, host)  # type: ignore[arg-type]
    assert all(c.paired_with == "" for c in late)
    assert registry.host(DEVICE) is None
