"""Hostile tool declarations (issue #11 items 1–4) against the real server over real sockets:
remote `$ref`s are never fetched, regex bombs never backtrack, tool lists are bounded, deep
schemas are refused with a JSON-RPC error — and an honest bystander session keeps its pace."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import websockets

from vixio.core.tools import ToolCallRequest, ToolDefinition, ToolExecutor, ToolSet
from vixio.testing.device import DeviceTool, SimulatedDevice
from vixio.testing.register_client import RegisterClient

from .conftest import ws_url
from .hostile import TURN_BOUND, Bystander, HangingEndpoint, captured_logs

pytestmark = pytest.mark.integration


def tool_entry(name: str, schema: dict[str, Any], description: str = "a tool") -> dict[str, Any]:
    return {"name": name, "description": description, "parameters": schema}


async def test_a_remote_ref_is_refused_at_registration_and_never_fetched(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with HangingEndpoint() as endpoint, captured_logs("INFO") as logs, Bystander(server) as bystander:
        schema = {"type": "object", "properties": {"x": {"$ref": endpoint.url()}}}
        async with RegisterClient(ws_url(server)) as client:
            reply = await client.register(
                tools=[tool_entry("fetcher", schema), tool_entry("fine", {"type": "object", "properties": {}})]
            )
            result = reply["result"]
            assert result["tools"] == 1
            (skipped,) = result["skipped"]
            assert skipped["name"] == "fetcher" and "$ref" in skipped["reason"] and "outside" in skipped["reason"]
            assert await bystander.turn() < TURN_BOUND
        assert endpoint.requests == []
        assert len(logs.lines("registerTools: skipped 1 of 2 tools")) == 1
        assert logs.tracebacks() == []


async def test_a_device_tool_with_a_remote_ref_is_skipped_and_never_fetched(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with HangingEndpoint() as endpoint, captured_logs("INFO") as logs:
        tools = [
            DeviceTool(
                "self.fetch",
                "fetches",
                {"type": "object", "properties": {"x": {"$ref": endpoint.url()}}},
                lambda args: True,
            ),
            DeviceTool("self.light.on", "light on", {"type": "object", "properties": {}}, lambda args: True),
        ]
        async with SimulatedDevice(ws_url=ws_url(server), tools=tools) as device:
            hello = await device.connect()
            client = server.transport.device_tools[hello["session_id"]]
            await asyncio.wait_for(_until(lambda: client.ready), 5)
            names = [t.name for t in client.all_tools]
            assert "self.light.on" in names and "self.fetch" not in names
        assert endpoint.requests == []
        (line,) = logs.lines("skipped 1 device tools")
        assert "$ref" in line.message


async def test_a_remote_ref_from_a_trusted_source_fails_the_call_fast_without_fetching(make_server) -> None:
    """Defence in depth: a schema that reached the executor anyway (a configured source) is
    validated with a registry that retrieves nothing: the call fails at once, nothing is fetched,
    and a bystander's turn meanwhile is unaffected."""
    server = await make_server(reply_seconds=0.2)
    async with HangingEndpoint() as endpoint, Bystander(server) as bystander:

        async def never(arguments: dict[str, Any]) -> str:
            raise AssertionError("an invalid call must not run")

        schema = {"type": "object", "properties": {"x": {"$ref": endpoint.url()}}}
        toolset = ToolSet()
        toolset.set_tools(
            "local",
            [ToolDefinition(name="fetcher", description="d", parameters=schema, source="local", executor=never)],
        )
        executor = ToolExecutor(toolset)
        started = time.monotonic()
        call = asyncio.create_task(
            executor.execute(ToolCallRequest(call_id="c1", tool_name="fetcher", arguments={"x": 1}))
        )
        turn = asyncio.create_task(bystander.turn())
        result = await call
        assert time.monotonic() - started < 1.0
        assert not result.success and "does not fetch" in result.text
        assert await turn < TURN_BOUND
        await executor.close()
        assert endpoint.requests == []


async def test_a_regex_bomb_pattern_is_matched_in_linear_time(make_server) -> None:
    """`^(a+)+$` against 27 a's and a '!' takes seconds on a backtracking engine; RE2 answers at once.
    With 40 a's a backtracking engine would take days, so a pass proves the engine."""
    server = await make_server(reply_seconds=0.2)
    schema = {"type": "object", "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}}}
    async with RegisterClient(ws_url(server)) as client, Bystander(server) as bystander:
        reply = await client.register(tools=[tool_entry("bomb", schema)])
        assert reply["result"]["tools"] == 1
        (tool,) = server.transport.register_clients[client.server_hello["session_id"]].tools
        toolset = ToolSet()
        toolset.set_tools("register", [tool])
        executor = ToolExecutor(toolset)
        started = time.monotonic()
        turn = asyncio.create_task(bystander.turn())
        result = await executor.execute(
            ToolCallRequest(call_id="c1", tool_name="bomb", arguments={"word": "a" * 40 + "!"})
        )
        assert time.monotonic() - started < 1.0
        assert not result.success and "does not match" in result.text
        assert await turn < TURN_BOUND
        # A matching argument passes validation and reaches the client (which has no handler for it).
        ok = await executor.execute(ToolCallRequest(call_id="c2", tool_name="bomb", arguments={"word": "aaaa"}))
        assert "invalid arguments" not in ok.text and "on the client" in ok.text
        await executor.close()


async def test_a_pattern_re2_cannot_run_is_refused_at_registration(make_server) -> None:
    server = await make_server()
    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^(?=.*\\d)\\w+$"}}}
    async with RegisterClient(ws_url(server)) as client:
        reply = await client.register(tools=[tool_entry("lookahead", schema)])
        (skipped,) = reply["result"]["skipped"]
        assert "RE2" in skipped["reason"]


async def test_too_many_tools_are_refused_with_an_error_naming_the_limit_and_logged_once(make_server) -> None:
    server = await make_server(reply_seconds=0.2, mcp={"limits": {"tools_per_source": 20}})
    entries = [tool_entry(f"t{i}", {"type": "object", "properties": {}}) for i in range(600)]
    async with captured_logs("INFO") as logs, RegisterClient(ws_url(server)) as client, Bystander(server) as bystander:
        for _ in range(3):
            reply = await client.register(tools=entries)
            assert reply["error"]["code"] == -32001
            assert "xiaozhi.mcp.limits.tools_per_source is 20" in reply["error"]["message"]
        assert server.transport.register_clients[client.server_hello["session_id"]].tools == []
        assert await bystander.turn() < TURN_BOUND
    assert len(logs.lines("refused a registration")) == 1


async def test_registrations_per_minute_are_limited(make_server) -> None:
    server = await make_server(mcp={"limits": {"registrations_per_minute": 3}})
    entries = [tool_entry("t", {"type": "object", "properties": {}})]
    async with captured_logs("INFO") as logs, RegisterClient(ws_url(server)) as client:
        replies = [await client.register(tools=entries) for _ in range(6)]
    assert [("result" in r) for r in replies] == [True, True, True, False, False, False]
    assert "registrations_per_minute is 3" in replies[3]["error"]["message"]
    assert len(logs.lines("refused a registration")) == 1


async def test_the_session_budget_is_shared_by_device_and_register_tools(make_server) -> None:
    server = await make_server(mcp={"limits": {"tools_per_source": 10, "tools_per_session": 12}})
    # The simulated device lists 4 tools of its own besides these 6.
    tools = [DeviceTool(f"self.t{i}", "d", {"type": "object", "properties": {}}, lambda args: True) for i in range(6)]
    async with SimulatedDevice(ws_url=ws_url(server), tools=tools) as device:
        hello = await device.connect()
        client = server.transport.device_tools[hello["session_id"]]
        await asyncio.wait_for(_until(lambda: client.ready), 5)
        assert len(client.all_tools) == 10
        register = server.transport.register_clients[hello["session_id"]]
        payloads: list[dict[str, Any]] = []
        original = register._send

        async def record(payload: dict[str, Any], envelope: Any) -> None:
            payloads.append(payload)
            await original(payload, envelope)

        register._send = record
        entries = [tool_entry(f"r{i}", {"type": "object", "properties": {}}) for i in range(3)]
        await device.send_json(
            {
                "type": "mcp",
                "payload": {"jsonrpc": "2.0", "id": "r-1", "method": "mcp/registerTools", "params": {"tools": entries}},
            }
        )
        await asyncio.wait_for(_until(lambda: bool(payloads)), 5)
        assert "tools_per_session is 12" in payloads[0]["error"]["message"]


@pytest.mark.parametrize(
    ("limit", "tool"),
    [
        ("description_chars", tool_entry("long", {"type": "object", "properties": {}}, "x" * 5000)),
        (
            "schema_bytes",
            tool_entry(
                "big",
                {
                    "type": "object",
                    "properties": {f"p{i}": {"type": "string", "description": "y" * 50} for i in range(200)},
                },
            ),
        ),
        ("name_chars", tool_entry("n" * 300, {"type": "object", "properties": {}})),
    ],
)
async def test_oversize_tools_are_skipped_naming_the_limit(make_server, limit: str, tool: dict[str, Any]) -> None:
    server = await make_server()
    async with RegisterClient(ws_url(server)) as client:
        reply = await client.register(tools=[tool])
        (skipped,) = reply["result"]["skipped"]
        assert f"xiaozhi.mcp.limits.{limit}" in skipped["reason"]


def nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"n": schema}}
    return schema


async def test_a_deep_schema_gets_a_jsonrpc_error_reason_and_no_traceback(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with captured_logs("INFO") as logs, RegisterClient(ws_url(server)) as client, Bystander(server) as bystander:
        reply = await client.register(tools=[tool_entry("deep", nested_schema(25))])
        (skipped,) = reply["result"]["skipped"]
        assert "xiaozhi.mcp.limits.schema_depth" in skipped["reason"]
        assert await bystander.turn() < TURN_BOUND
    assert logs.tracebacks() == []


async def test_a_240_level_schema_frame_closes_with_1008_and_a_reason(make_server) -> None:
    """Deeper than the frame limit (xiaozhi.max_json_depth): refused before parsing, the
    connection closed with 1008 and a reason, one log line, no traceback."""
    server = await make_server(reply_seconds=0.2)
    async with captured_logs("INFO") as logs, Bystander(server) as bystander:
        async with websockets.connect(ws_url(server), additional_headers={"Device-Id": "aa:bb:cc:00:00:66"}) as ws:
            await ws.send(json.dumps({"type": "hello", "version": 1, "transport": "websocket"}))
            payload = {
                "jsonrpc": "2.0",
                "id": "x",
                "method": "mcp/registerTools",
                "params": {"tools": [tool_entry("deep", nested_schema(240))]},
            }
            await ws.send(json.dumps(payload))
            await asyncio.wait_for(ws.wait_closed(), 5)
            assert ws.close_code == 1008 and "nested deeper than 64" in (ws.close_reason or "")
        assert await bystander.turn() < TURN_BOUND
    (line,) = logs.lines("closing the connection (1008)")
    assert "nested deeper than 64" in line.message
    assert logs.tracebacks() == []


async def _until(predicate: Any, step: float = 0.01) -> None:
    while not predicate():
        await asyncio.sleep(step)


async def test_with_a_raised_frame_limit_a_240_level_schema_gets_a_jsonrpc_answer(make_server) -> None:
    server = await make_server(max_json_depth=512)
    async with captured_logs("INFO") as logs, RegisterClient(ws_url(server)) as client:
        reply = await client.register(tools=[tool_entry("deep", nested_schema(240))])
        (skipped,) = reply["result"]["skipped"]
        assert "xiaozhi.mcp.limits.schema_depth" in skipped["reason"]
    assert logs.tracebacks() == []


async def test_a_device_listing_hundreds_of_tools_is_cut_at_the_limit_and_logged_once(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    tools = [
        DeviceTool(f"self.tool_{i:04d}", "d" * 60, {"type": "object", "properties": {}}, lambda args: True)
        for i in range(1000)
    ]
    async with captured_logs("INFO") as logs, Bystander(server) as bystander:
        async with SimulatedDevice(ws_url=ws_url(server), tools=tools) as device:
            hello = await device.connect()
            client = server.transport.device_tools[hello["session_id"]]
            await asyncio.wait_for(_until(lambda: client.ready), 10)
            assert len(client.all_tools) == 64
            pages = [r for r in device.mcp_requests if r.get("method") == "tools/list"]
            assert len(pages) < 10  # listing stopped at the page that crossed the limit
            assert await bystander.turn() < TURN_BOUND
    (line,) = logs.lines("the device lists more than 64 tools")
    assert "xiaozhi.mcp.limits.tools_per_source is 64" in line.message
