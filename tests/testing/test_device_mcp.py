"""The simulated device's MCP server, driven by a loopback server the way a backend would (§4)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.testing.conftest import DeviceConnection, LoopbackServer
from vixio.testing.device import DeviceTool, SimulatedDevice, hang_forever

pytestmark = pytest.mark.integration

Connect = Callable[..., Awaitable[tuple[SimulatedDevice, DeviceConnection]]]


@pytest.fixture
async def connect(server: LoopbackServer) -> AsyncIterator[Connect]:
    devices: list[SimulatedDevice] = []

    async def make(**kwargs: Any) -> tuple[SimulatedDevice, DeviceConnection]:
        device = SimulatedDevice(ws_url=server.ws_url, **kwargs)
        devices.append(device)
        connecting = asyncio.create_task(device.connect())
        connection = await server.accept()
        await connection.handshake()
        await connecting
        return device, connection

    yield make
    for device in devices:
        await device.close()


def bulky_tools(count: int) -> list[DeviceTool]:
    """Board tools with long descriptions, so a listing needs several 8000-byte pages."""
    schema = {
        "type": "object",
        "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["level"],
    }
    return [
        DeviceTool(
            f"self.board.tool_{i:02d}",
            f"Tool number {i}. " + "Does a board-specific thing. " * 20,
            schema,
            lambda args: args["level"],
        )
        for i in range(count)
    ]


def payload_bytes(payload: dict[str, Any]) -> int:
    return len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())


async def test_initialize_reply_and_vision_capability(connect: Connect) -> None:
    device, connection = await connect()
    vision = {"url": "http://127.0.0.1:8003/mcp/vision/explain", "token": "t"}
    reply = await connection.call(
        1,
        "initialize",
        {
            "protocolVersion": "2024-11-05",
            "capabilities": {"vision": vision},
            "clientInfo": {"name": "test", "version": "1"},
        },
    )
    assert reply == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bread-compact-wifi", "version": "2.4.2"},
        },
    }
    assert device.mcp_stats.vision == vision


async def test_requests_without_numeric_id_or_jsonrpc_2_are_dropped_silently(connect: Connect) -> None:
    device, connection = await connect()
    await connection.mcp({"jsonrpc": "2.0", "id": "7", "method": "tools/list"})
    await connection.mcp({"jsonrpc": "2.0", "id": True, "method": "tools/list"})
    await connection.mcp({"jsonrpc": "1.0", "id": 8, "method": "tools/list"})
    await connection.mcp({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": "oops"})
    await connection.mcp({"jsonrpc": "2.0", "method": "notifications/initialized"})
    reply = await connection.call(10, "initialize")
    # Replies keep request order, so the first reply being id 10 proves the others got none.
    assert reply["id"] == 10 and "result" in reply
    assert device.mcp_stats.dropped == 4 and device.mcp_stats.notifications == 1
    assert len(device.mcp_requests) == 6
    await connection.expect_no_json(0.2)


async def test_tools_list_pages_fit_8000_bytes_and_resume_at_the_cursor_name(connect: Connect) -> None:
    device, connection = await connect(tools=bulky_tools(40))
    expected = [tool.name for tool in device.mcp_tools if not tool.user_only]
    listed: list[str] = []
    pages = 0
    cursor = ""
    while True:
        reply = await connection.call(2, "tools/list", {"cursor": cursor, "withUserTools": False})
        pages += 1
        assert payload_bytes(reply) <= 8000
        tools = reply["result"]["tools"]
        assert tools and all("annotations" not in tool for tool in tools)
        listed += [tool["name"] for tool in tools]
        if "nextCursor" not in reply["result"]:
            break
        cursor = reply["result"]["nextCursor"]
        assert cursor == expected[len(listed)]  # the name of the first tool of the next page
    assert pages >= 3 and listed == expected and len(listed) == 44
    assert "self.get_system_info" not in listed and "self.reboot" not in listed


async def test_user_only_tools_are_listed_with_with_user_tools(connect: Connect) -> None:
    _, connection = await connect()
    reply = await connection.call(2, "tools/list", {"withUserTools": True})
    tools = {tool["name"]: tool for tool in reply["result"]["tools"]}
    assert tools["self.reboot"]["annotations"] == {"audience": ["user"]}
    assert tools["self.get_system_info"]["annotations"] == {"audience": ["user"]}
    assert "annotations" not in tools["self.get_device_status"]
    assert tools["self.audio_speaker.set_volume"]["inputSchema"] == {
        "type": "object",
        "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["volume"],
    }
    plain = await connection.call(3, "tools/list")  # params omitted
    assert [t["name"] for t in plain["result"]["tools"]] == [
        "self.get_device_status",
        "self.audio_speaker.set_volume",
        "self.screen.set_brightness",
        "self.screen.set_theme",
    ]


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("resources/list", None, "Method not implemented: resources/list"),
        ("tools/call", None, "Missing params"),
        ("tools/call", {"arguments": {}}, "Missing name"),
        ("tools/call", {"name": "self.reboot", "arguments": [1]}, "Invalid arguments"),
        ("tools/call", {"name": "self.lamp.on", "arguments": {}}, "Unknown tool: self.lamp.on"),
        ("tools/call", {"name": "self.audio_speaker.set_volume", "arguments": {}}, "Missing valid argument: volume"),
        (
            "tools/call",
            {"name": "self.audio_speaker.set_volume", "arguments": {"volume": "50"}},
            "Missing valid argument: volume",
        ),
        (
            "tools/call",
            {"name": "self.audio_speaker.set_volume", "arguments": {"volume": True}},
            "Missing valid argument: volume",
        ),
        (
            "tools/call",
            {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 101}},
            "Value exceeds maximum allowed: 100",
        ),
        (
            "tools/call",
            {"name": "self.audio_speaker.set_volume", "arguments": {"volume": -1}},
            "Value is below minimum allowed: 0",
        ),
        ("tools/call", {"name": "self.screen.set_theme", "arguments": {"theme": 1}}, "Missing valid argument: theme"),
    ],
)
async def test_errors_carry_only_a_message(
    connect: Connect, method: str, params: dict[str, Any] | None, message: str
) -> None:
    device, connection = await connect()
    reply = await connection.call(5, method, params)
    assert reply == {"jsonrpc": "2.0", "id": 5, "error": {"message": message}}  # no "code"
    assert device.status.volume == 70


async def test_tool_calls_change_and_report_the_simulated_state(connect: Connect) -> None:
    device, connection = await connect()
    reply = await connection.call(
        3, "tools/call", {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 35}}
    )
    assert reply == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [{"type": "text", "text": "true"}], "isError": False},
    }
    await connection.call(4, "tools/call", {"name": "self.screen.set_theme", "arguments": {"theme": "dark"}})
    status = await connection.call(5, "tools/call", {"name": "self.get_device_status", "arguments": {}})
    text = status["result"]["content"][0]["text"]
    assert " " not in text  # compact JSON, as cJSON prints it
    report = json.loads(text)
    assert report["audio_speaker"] == {"volume": 35} and report["screen"]["theme"] == "dark"
    assert set(report) == {"audio_speaker", "screen", "battery", "network", "chip"}
    info = await connection.call(6, "tools/call", {"name": "self.get_system_info"})  # user-only tools are callable
    assert json.loads(info["result"]["content"][0]["text"])["mac_address"] == device.device_id


async def test_slow_and_hanging_tools_do_not_block_the_channel(connect: Connect) -> None:
    async def slow(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.2)
        return {"done": args["flag"], "n": 2}

    def broken(args: dict[str, Any]) -> str:
        raise RuntimeError("motor stalled")

    flag_schema = {
        "type": "object",
        "properties": {"flag": {"type": "boolean"}, "n": {"type": "integer", "default": 3}},
    }
    device, connection = await connect(
        tools=[
            DeviceTool("self.slow", "slow", flag_schema, slow),
            DeviceTool("self.hang", "never answers", {"type": "object", "properties": {}}, hang_forever),
            DeviceTool("self.broken", "fails", {"type": "object", "properties": {}}, broken),
            DeviceTool("self.flag", "echo flag", flag_schema, lambda args: args["flag"] and args["n"] == 3),
        ]
    )
    call = {"jsonrpc": "2.0", "method": "tools/call"}
    await connection.mcp({**call, "id": 20, "params": {"name": "self.hang", "arguments": {}}})
    await connection.mcp({**call, "id": 21, "params": {"name": "self.slow", "arguments": {"flag": True}}})
    await connection.mcp({**call, "id": 22, "params": {"name": "self.broken", "arguments": {}}})
    await connection.mcp({**call, "id": 23, "params": {"name": "self.flag", "arguments": {"flag": False}}})
    replies = [await connection.mcp_reply() for _ in range(3)]
    by_id = {reply["id"]: reply for reply in replies}
    assert set(by_id) == {21, 22, 23} and replies[-1]["id"] == 21  # the slow one answers last
    assert by_id[21]["result"]["content"][0]["text"] == '{"done":true,"n":2}'
    assert by_id[22] == {"jsonrpc": "2.0", "id": 22, "error": {"message": "motor stalled"}}
    assert by_id[23]["result"]["content"][0]["text"] == "false"
    await connection.expect_no_json(0.2)  # id 20 never answers
    await device.send_text("channel still works")
    assert (await connection.next_json("listen"))["text"] == "channel still works"
