"""The device tool client over a real server: the simulated device's faithful MCP server
(int ids only, errors without code, 8000-byte pages) answers XiaozhiDeviceToolClient."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

import vixio
from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.core.pipeline import Pipeline
from vixio.core.tools.types import ToolDefinition
from vixio.testing.device import DeviceTool, McpToolResult, SimulatedDevice, hang_forever
from vixio.testing.device.mcp import DeviceMcpServer
from vixio.transports.xiaozhi.http.hosts import derive_vision_url
from vixio.transports.xiaozhi.mcp.device_tools import XiaozhiDeviceToolClient, tool_call_result
from vixio.transports.xiaozhi.websocket.transport import DeviceContext

from .conftest import ServerFactory, ws_url

pytestmark = pytest.mark.integration

OBJECT_WITH_LEVEL = {
    "type": "object",
    "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["level"],
}


def bulky_tools(count: int) -> list[DeviceTool]:
    """Board tools with long descriptions, so a listing needs several 8000-byte pages."""
    return [
        DeviceTool(
            f"self.board.tool_{i:02d}",
            f"Tool number {i}. " + "Does a board-specific thing. " * 20,
            OBJECT_WITH_LEVEL,
            lambda args: args["level"],
        )
        for i in range(count)
    ]


@dataclass
class Setup:
    server: VixioServer
    device: SimulatedDevice
    lists: asyncio.Queue[list[ToolDefinition]]
    """What the transport's tools callback received, one entry per completed listing."""

    @property
    def client(self) -> XiaozhiDeviceToolClient:
        return self.server.transport.device_tools[self.device.session_id]

    async def next_list(self, timeout: float = 3.0) -> list[ToolDefinition]:
        return await asyncio.wait_for(self.lists.get(), timeout)

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [r for r in self.device.mcp_requests if r.get("method") == method]


Connect = Callable[..., Awaitable[Setup]]


@pytest.fixture
async def connect(make_server: ServerFactory) -> AsyncIterator[Connect]:
    devices: list[SimulatedDevice] = []

    async def make(
        *,
        tools: list[DeviceTool] | tuple[DeviceTool, ...] = (),
        server_mcp: dict[str, Any] | None = None,
        **device_options: Any,
    ) -> Setup:
        """`server_mcp` is the `xiaozhi.mcp` config; `device_options` go to SimulatedDevice."""
        server = await make_server(mcp=server_mcp or {})
        lists: asyncio.Queue[list[ToolDefinition]] = asyncio.Queue()
        build_pipeline = server.transport._pipeline_factory

        async def factory(context: DeviceContext) -> Pipeline:
            # What the app layer does: register the callback inside the factory, before the client starts.
            async def tools_ready(definitions: list[ToolDefinition]) -> None:
                lists.put_nowait(definitions)

            context.transport.set_device_tools_callback(context.session_id, tools_ready)
            return await build_pipeline(context)

        server.transport._pipeline_factory = factory
        device = SimulatedDevice(ws_url=ws_url(server), tools=list(tools), **device_options)
        devices.append(device)
        await device.connect()
        return Setup(server, device, lists)

    yield make
    for device in devices:
        await device.close()


async def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# --- listing ----------------------------------------------------------------------------------


async def test_initialize_handshake_then_every_page_of_40_tools(connect: Connect) -> None:
    setup = await connect(tools=bulky_tools(40))
    definitions = await setup.next_list()

    initialize, initialized = setup.device.mcp_requests[:2]
    assert initialize["method"] == "initialize" and isinstance(initialize["id"], int)
    params = initialize["params"]
    assert params["protocolVersion"] == "2024-11-05"
    assert params["clientInfo"] == {"name": "vixio", "version": vixio.__version__}
    vision = params["capabilities"]["vision"]
    assert set(vision) == {"url", "token"} and vision["token"] == ""  # auth is off: no token to hand out
    assert vision["url"].startswith("http://127.0.0.1:") and vision["url"].endswith("/mcp/vision/explain")
    assert setup.device.mcp_stats.vision == vision
    assert initialized == {"jsonrpc": "2.0", "method": "notifications/initialized"}

    pages = setup.requests("tools/list")
    assert len(pages) >= 3
    assert all(page["params"]["withUserTools"] is False for page in pages)
    assert pages[0]["params"]["cursor"] == ""
    served = [tool for tool in setup.device.mcp_tools if not tool.user_only]
    names = [tool.name for tool in served]
    # Each next page resumes at a tool name, in listing order (the firmware's cursor).
    cursors = [page["params"]["cursor"] for page in pages[1:]]
    assert all(cursor in names for cursor in cursors) and cursors == sorted(cursors, key=names.index)

    assert [d.name for d in definitions] == names  # 4 built-ins + 40, dotted names kept
    assert len([d for d in definitions if d.name.startswith("self.board.")]) == 40
    assert all(d.source == "device" and d.client is setup.client and not d.hidden for d in definitions)
    by_name = {d.name: d for d in definitions}
    assert by_name["self.board.tool_07"].parameters == OBJECT_WITH_LEVEL
    assert by_name["self.get_device_status"].parameters == {"type": "object", "properties": {}}
    assert setup.client.ready and setup.client.server_info == {"name": "bread-compact-wifi", "version": "2.4.2"}
    assert setup.device.mcp_stats.dropped == 0


async def test_request_ids_are_unique_increasing_integers(connect: Connect) -> None:
    setup = await connect(tools=bulky_tools(20))
    await setup.next_list()
    await setup.client.call_tool("self.get_device_status", {})
    await asyncio.gather(*(setup.client.call_tool("self.board.tool_01", {"level": n}) for n in range(3)))

    ids = [r["id"] for r in setup.device.mcp_requests if "id" in r]
    assert len(ids) >= 7
    assert all(type(i) is int for i in ids)
    assert ids == sorted(set(ids))
    assert setup.device.mcp_stats.dropped == 0


async def test_user_only_tools_are_hidden_from_the_model() -> None:
    # xiaozhi-sdk style servers list every tool whatever `withUserTools` says.
    sent: list[dict[str, Any]] = []
    lists: list[list[ToolDefinition]] = []

    async def to_device(payload: dict[str, Any]) -> None:
        sent.append(payload)
        if payload.get("method") == "tools/list":
            payload = {**payload, "params": {**payload["params"], "withUserTools": True}}
        await device.handle(payload)

    async def to_client(payload: dict[str, Any]) -> None:
        client.on_mcp_message(payload)

    async def tools_changed(definitions: list[ToolDefinition]) -> None:
        lists.append(definitions)

    device = DeviceMcpServer(
        bulky_tools(3) + [DeviceTool("self.reboot", "Reboot.", {}, lambda a: True, user_only=True)],
        board="b",
        firmware_version="1",
        send=to_client,
    )
    client = XiaozhiDeviceToolClient("s", to_device, on_tools_changed=tools_changed, device_id="aa:bb")
    assert await client.initialize()

    assert [d.name for d in client.all_tools] == [*(f"self.board.tool_0{i}" for i in range(3)), "self.reboot"]
    assert [d.name for d in client.all_tools if d.hidden] == ["self.reboot"]
    assert "self.reboot" not in [d.name for d in client.get_tool_definitions()]
    assert lists == [client.get_tool_definitions()] and len(lists[0]) == 3


async def test_list_changed_lists_again_and_calls_back_with_the_new_tools(connect: Connect) -> None:
    setup = await connect(tools=bulky_tools(2))
    first = await setup.next_list()
    assert "self.board.tool_01" in [d.name for d in first]

    setup.device.mcp_tools.append(
        DeviceTool("self.light.set_rgb", "Set the LED colour.", OBJECT_WITH_LEVEL, lambda args: True)
    )
    setup.device.mcp_tools[:] = [t for t in setup.device.mcp_tools if t.name != "self.board.tool_01"]
    await setup.device.notify_mcp_tools_changed()
    second = await setup.next_list()

    names = [d.name for d in second]
    assert "self.light.set_rgb" in names and "self.board.tool_01" not in names
    assert [d.name for d in setup.client.get_tool_definitions()] == names
    assert len(setup.requests("tools/list")) == 2
    assert len(setup.requests("initialize")) == 1


async def test_a_device_without_the_mcp_feature_gets_no_initialize(connect: Connect) -> None:
    setup = await connect(mcp=False)
    await asyncio.sleep(0.3)
    assert setup.server.transport.device_tools == {}
    assert setup.lists.empty()
    # The device reports any `mcp` message it gets while it announced no MCP support.
    assert not [w for w in setup.device.warnings if "mcp" in w]
    assert setup.server.transport.connections  # the session itself runs


async def test_a_silent_device_fails_initialize_within_list_timeout() -> None:
    async def nowhere(payload: dict[str, Any]) -> None:
        return None

    client = XiaozhiDeviceToolClient("s", nowhere, list_timeout=0.2, device_id="aa:bb")
    started = time.monotonic()
    assert await client.initialize() is False
    assert time.monotonic() - started < 1.0
    assert client.pending_requests == 0 and not client.ready and client.get_tool_definitions() == []


async def test_a_cursor_that_comes_back_ends_the_listing() -> None:
    pages = 0

    async def looping_device(payload: dict[str, Any]) -> None:
        nonlocal pages
        if "id" not in payload:
            return
        if payload["method"] == "initialize":
            result: dict[str, Any] = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}}}
        else:
            pages += 1
            result = {"tools": [{"name": f"t{pages}", "description": "", "inputSchema": {}}], "nextCursor": "again"}
        client.on_mcp_message({"jsonrpc": "2.0", "id": payload["id"], "result": result})

    client = XiaozhiDeviceToolClient("s", looping_device, list_timeout=0.5)
    assert await client.initialize()
    assert pages == 2 and [d.name for d in client.get_tool_definitions()] == ["t1", "t2"]


# --- calls ------------------------------------------------------------------------------------


async def test_call_tool_sends_the_dotted_name_and_arguments_and_returns_the_text(connect: Connect) -> None:
    setup = await connect()
    await setup.next_list()

    result = await setup.client.call_tool("self.audio_speaker.set_volume", {"volume": 30})
    assert result.success and result.result == "true"
    assert setup.device.status.volume == 30
    call = setup.requests("tools/call")[-1]
    assert call["params"] == {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}}

    status = await setup.client.call_tool("self.get_device_status", {})
    assert status.success and '"audio_speaker":{"volume":30}' in (status.result or "")


async def test_every_content_block_becomes_text(connect: Connect) -> None:
    blocks = McpToolResult(
        [
            {"type": "text", "text": "first"},
            {"type": "text", "text": "second"},
            {"type": "image", "data": "AAEC", "mimeType": "image/jpeg"},
            {"type": "image", "image": '{"w":1}'},
        ]
    )
    setup = await connect(tools=[DeviceTool("self.camera.describe", "d", {}, lambda args: blocks)])
    await setup.next_list()

    result = await setup.client.call_tool("self.camera.describe", {})
    assert result.success
    assert result.result == 'first\nsecond\n[image image/jpeg, 3 bytes]\n{"type":"image","image":"{\\"w\\":1}"}'


async def test_structured_content_is_used_when_there_is_no_text(connect: Connect) -> None:
    structured = McpToolResult([], structured={"temperature": 21.5})
    setup = await connect(tools=[DeviceTool("self.sensor.read", "d", {}, lambda args: structured)])
    await setup.next_list()
    result = await setup.client.call_tool("self.sensor.read", {})
    assert result.success and result.result == '{"temperature":21.5}'


async def test_is_error_result_is_a_failure_with_its_text(connect: Connect) -> None:
    busy = McpToolResult([{"type": "text", "text": "camera busy"}], is_error=True)
    setup = await connect(tools=[DeviceTool("self.camera.take_photo", "d", {}, lambda args: busy)])
    await setup.next_list()
    result = await setup.client.call_tool("self.camera.take_photo", {})
    assert not result.success and result.error == "camera busy"


async def test_device_errors_without_a_code_become_failure_text(connect: Connect) -> None:
    setup = await connect()
    await setup.next_list()

    too_loud = await setup.client.call_tool("self.audio_speaker.set_volume", {"volume": 500})
    assert not too_loud.success and too_loud.error == "device error: Value exceeds maximum allowed: 100"
    unknown = await setup.client.call_tool("self.nothing", {})
    assert unknown.error == "device error: Unknown tool: self.nothing"
    assert setup.device.status.volume == 70  # unchanged


def test_error_codes_are_kept_when_the_server_sends_them() -> None:
    reply = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Missing valid argument: volume"}}
    assert tool_call_result("x", reply).error == "device error -32602: Missing valid argument: volume"
    assert tool_call_result("x", {"jsonrpc": "2.0", "id": 3, "result": "nope"}).success is False


async def test_a_tool_that_never_answers_times_out_and_is_cancelled_on_the_device(connect: Connect) -> None:
    setup = await connect(
        tools=[DeviceTool("self.board.stuck", "d", {}, hang_forever)], server_mcp={"tool_call_timeout": 0.3}
    )
    await setup.next_list()

    started = time.monotonic()
    result = await setup.client.call_tool("self.board.stuck", {})
    assert time.monotonic() - started < 1.5
    assert not result.success and result.error == "the device did not answer self.board.stuck within 0.3 s"
    call_id = setup.requests("tools/call")[-1]["id"]
    await wait_until(lambda: bool(setup.requests("notifications/cancelled")))
    cancelled = setup.requests("notifications/cancelled")[-1]
    assert cancelled["params"]["requestId"] == call_id and cancelled["params"]["reason"]
    assert setup.client.pending_requests == 0


async def test_a_call_cancelled_by_the_caller_is_cancelled_on_the_device(connect: Connect) -> None:
    setup = await connect(tools=[DeviceTool("self.board.stuck", "d", {}, hang_forever)])
    await setup.next_list()

    call = asyncio.create_task(setup.client.call_tool("self.board.stuck", {}))
    await wait_until(lambda: bool(setup.requests("tools/call")))
    call.cancel()  # barge-in
    with pytest.raises(asyncio.CancelledError):
        await call
    await wait_until(lambda: bool(setup.requests("notifications/cancelled")))
    cancelled = setup.requests("notifications/cancelled")[-1]
    assert cancelled["params"]["requestId"] == setup.requests("tools/call")[-1]["id"]
    assert setup.client.pending_requests == 0


async def test_a_device_that_disconnects_mid_call_fails_the_call_at_once(connect: Connect) -> None:
    setup = await connect(tools=[DeviceTool("self.board.stuck", "d", {}, hang_forever)])
    await setup.next_list()
    client = setup.client  # the transport forgets it when the session ends

    call = asyncio.create_task(client.call_tool("self.board.stuck", {}))
    await wait_until(lambda: bool(setup.requests("tools/call")))
    started = time.monotonic()
    await setup.device.close()
    result = await asyncio.wait_for(call, 2)
    assert time.monotonic() - started < 1.0  # not the 30 s tool timeout
    assert not result.success and result.error == "the device disconnected before answering self.board.stuck"
    assert client.pending_requests == 0
    await wait_until(lambda: not setup.server.transport.device_tools)
    late = await client.call_tool("self.get_device_status", {})
    assert not late.success and "disconnected" in (late.error or "")


async def test_a_late_reply_to_a_forgotten_request_is_ignored() -> None:
    async def nowhere(payload: dict[str, Any]) -> None:
        return None

    client = XiaozhiDeviceToolClient("s", nowhere, timeout=0.05)
    result = await client.call_tool("self.slow", {})
    assert not result.success
    client.on_mcp_message({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "late"}]}})
    client.on_mcp_message({"jsonrpc": "2.0", "id": "1", "result": {}})  # malformed: dropped
    client.on_mcp_message({"not": "json-rpc"})  # type: ignore[arg-type]
    assert client.pending_requests == 0


# --- vision URL -------------------------------------------------------------------------------


def test_vision_url_comes_from_config_then_public_url_then_the_dialled_host() -> None:
    def config(**xiaozhi: Any) -> Any:
        return VixioConfig.model_validate({"xiaozhi": xiaozhi}).xiaozhi

    assert derive_vision_url(config(mcp={"vision_url": "https://v.example/x"}), "h:1") == "https://v.example/x"
    assert (
        derive_vision_url(config(public_url="wss://voice.example.com/xiaozhi/v1/"), "h:1")
        == "https://voice.example.com/mcp/vision/explain"
    )
    assert (
        derive_vision_url(config(), "192.168.1.5:8000", local_address="192.168.1.5")
        == "http://192.168.1.5:8003/mcp/vision/explain"
    )
    # A Host that does not name this server is not reflected: the address the connection arrived on is used.
    assert (
        derive_vision_url(config(), "evil.example:8000", local_address="192.168.1.5")
        == "http://192.168.1.5:8003/mcp/vision/explain"
    )
    assert (
        derive_vision_url(config(allowed_hosts=["voice.lan"]), "voice.lan:8000", local_address="10.0.0.2")
        == "http://voice.lan:8003/mcp/vision/explain"
    )
    assert derive_vision_url(config(), "", http_port=9000) == "http://127.0.0.1:9000/mcp/vision/explain"


# --- a third-party MCP server -----------------------------------------------------------------


async def test_xiaozhi_sdk_device_tools_are_listed_and_called(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PyPI `xiaozhi-sdk` client is someone else's MCP server: it raises KeyError (and never
    answers) without `capabilities.vision`, so a listing proves the handshake suits it."""
    import ctypes.util

    find_library = ctypes.util.find_library
    sdk = pytest.importorskip("xiaozhi_sdk", reason="xiaozhi-sdk is not installed (the `test` extra)")
    ctypes.util.find_library = find_library  # the import points it at the sdk's bundled libopus
    monkeypatch.setattr("xiaozhi_sdk.ota.get_ip", lambda: "127.0.0.1")
    for name in ("ALL_PROXY", "HTTP_PROXY", "HTTPS_PROXY", "WS_PROXY", "WSS_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)

    server = await make_server(auth={"enabled": True, "secret": "interop-test-secret"})
    lists: asyncio.Queue[list[ToolDefinition]] = asyncio.Queue()
    build_pipeline = server.transport._pipeline_factory

    async def factory(context: DeviceContext) -> Pipeline:
        async def tools_ready(definitions: list[ToolDefinition]) -> None:
            lists.put_nowait(definitions)

        context.transport.set_device_tools_callback(context.session_id, tools_ready)
        return await build_pipeline(context)

    server.transport._pipeline_factory = factory
    volumes: list[dict[str, Any]] = []

    async def set_volume(arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        volumes.append(arguments)
        return {"volume": arguments["volume"]}, False

    async def on_message(message: dict[str, Any]) -> None:
        return None

    client = sdk.XiaoZhiWebsocket(message_handler_callback=on_message, ota_url=server.ota.url)
    await client.set_mcp_tool(
        [
            {
                "name": "self.audio_speaker.set_volume",
                "description": "Set the speaker volume (0-100).",
                "inputSchema": {
                    "type": "object",
                    "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
                    "required": ["volume"],
                },
                "tool_func": set_volume,
                "is_async": True,
            }
        ]
    )
    try:
        assert await client.init_connection("AA:BB:CC:00:5D:4C"), "the sdk could not connect (see its log)"
        definitions = await asyncio.wait_for(lists.get(), 5)
        assert [d.name for d in definitions] == ["self.audio_speaker.set_volume"]
        assert client.explain_url.endswith("/mcp/vision/explain")
        assert client.explain_token  # auth is on: the device got a token for its vision uploads

        tools = server.transport.device_tools[client.session_id]
        result = await tools.call_tool("self.audio_speaker.set_volume", {"volume": 30})
        assert result.success and result.result == '{"volume": 30}'
        assert volumes == [{"volume": 30}]
    finally:
        await client.close()
