"""Third-party MCP servers as a tool source: real servers (tests/fixtures/mcp_servers) over
stdio, streamable HTTP and SSE, called through ToolSet + ToolExecutor as a session would."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from tests.providers.tools.conftest import http_config, pid_alive, stdio_config
from vixio.config.mcp import McpServerConfig
from vixio.core.tools import (
    ToolCallRequest,
    ToolCallResult,
    ToolExecutor,
    ToolPolicy,
    ToolSet,
)
from vixio.providers.tools import McpServerPool, McpServerTools, call_result

pytestmark = pytest.mark.process


def executor_for(tools: dict[str, list], policy: ToolPolicy | None = None) -> ToolExecutor:
    toolset = ToolSet(policy)
    for key, definitions in tools.items():
        toolset.set_tools(key, definitions)
    return ToolExecutor(toolset)


async def call(executor: ToolExecutor, tool: str, raw: str = "{}") -> ToolCallResult:
    return await executor.execute(ToolCallRequest(call_id="c1", tool_name=tool, raw=raw))


async def pid_of(executor: ToolExecutor, tool: str = "server_pid") -> int:
    result = await call(executor, tool)
    assert result.success, result.text
    return int(result.text)


async def test_stdio_server_tools_run_through_the_executor() -> None:
    import agents.mcp.server  # noqa: F401  (imported on first connect; kept out of the timing)

    pool = McpServerPool({"weather": stdio_config()})
    started = time.perf_counter()
    await pool.start()
    connect_ms = (time.perf_counter() - started) * 1000
    try:
        assert pool.failures == {}
        tools = pool.process_tools()
        assert list(tools) == ["mcp:weather"]
        weather = {tool.name: tool for tool in tools["mcp:weather"]}
        assert weather["get_weather"].source == "mcp" and weather["get_weather"].origin == "weather"
        assert weather["get_weather"].parameters["required"] == ["city"]
        assert weather["get_weather"].description == "Current weather in a city."
        executor = executor_for(tools)

        started = time.perf_counter()
        result = await executor.execute(ToolCallRequest(call_id="c1", tool_name="get_weather", raw='{"city":"Paris"}'))
        call_ms = (time.perf_counter() - started) * 1000
        assert (result.call_id, result.success, result.text) == ("c1", True, "Paris: Sunny, 21 °C")

        forecast = await call(executor, "forecast", '{"city": "Oslo", "days": "3"}')  # "3" coerced by the executor
        assert forecast.text == "Oslo day 1: Cloudy, 15 °C\nOslo day 2: Cloudy, 16 °C\nOslo day 3: Cloudy, 17 °C"

        booked = await call(executor, "book_table", '{"restaurant": "Chez Nous"}')
        assert not booked.success and booked.text == "Error: Chez Nous is fully booked"

        image = await call(executor, "radar_image")
        assert image.success and image.text == "[image image/png, 70 bytes, not shown]"

        air = await call(executor, "air_quality", '{"city": "Rome"}')
        assert air.success and json.loads(air.text) == {"city": "Rome", "aqi": 42}
        print(f"\nstdio MCP server: connect {connect_ms:.0f} ms, get_weather round trip {call_ms:.1f} ms")
    finally:
        await pool.close()


async def test_streamable_http_server(http_base: str) -> None:
    pool = McpServerPool({"remote": http_config(f"{http_base}/mcp", transport="http")})
    await pool.start()
    try:
        assert pool.failures == {}
        executor = executor_for(pool.process_tools())
        result = await call(executor, "get_weather", '{"city":"London"}')
        assert (result.success, result.text) == (True, "London: Rain, 12 °C")
        many = await call(executor, "forecast", '{"city":"London","days":2}')
        assert many.text.splitlines() == ["London day 1: Cloudy, 15 °C", "London day 2: Cloudy, 16 °C"]
        failed = await call(executor, "book_table", '{"restaurant":"X"}')
        assert failed.text == "Error: X is fully booked"
    finally:
        await pool.close()


async def test_sse_server(sse_base: str) -> None:
    server = McpServerTools("legacy", http_config(f"{sse_base}/sse", type="sse"))
    await server.connect()
    try:
        result = await server.call_tool("get_weather", {"city": "Paris"})
        assert result.text == "Paris: Sunny, 21 °C"
    finally:
        await server.close()


async def test_a_server_that_does_not_start_leaves_the_others_working(http_base: str) -> None:
    configs: dict[str, McpServerConfig] = {
        "good": stdio_config(),
        "missing": stdio_config(command="/nonexistent/bin/mcp-weather", args=["--x"]),
        "crashes": stdio_config(command=sys.executable, args=["-c", "import sys; sys.exit(1)"]),
        "silent": stdio_config(command="sleep", args=["30"], startup_timeout=1),
        "unreachable": http_config("http://127.0.0.1:9/mcp"),
        "off": stdio_config(command="/nonexistent/too", enabled=False),
    }
    pool = McpServerPool(configs)
    started = time.perf_counter()
    await pool.start()
    elapsed = time.perf_counter() - started
    try:
        assert set(pool.failures) == {"missing", "crashes", "silent", "unreachable"}
        assert (
            pool.failures["missing"] == "/nonexistent/bin/mcp-weather --x: command not found (check `command` and PATH)"
        )
        assert "Connection closed" in pool.failures["crashes"] and "exited" in pool.failures["crashes"]
        assert pool.failures["silent"] == "sleep 30: no answer within 1 s"
        assert pool.failures["unreachable"].startswith("http://127.0.0.1:9/mcp (streamable-http): ")
        assert "reach" in pool.failures["unreachable"]
        assert list(pool.process_tools()) == ["mcp:good"]
        assert elapsed < 10, "servers start concurrently, and a silent one is bounded by its timeout"
        result = await call(executor_for(pool.process_tools()), "get_weather", '{"city":"Paris"}')
        assert result.text == "Paris: Sunny, 21 °C"
    finally:
        await pool.close()


async def test_session_scope_starts_a_process_per_session_and_stops_it() -> None:
    pool = McpServerPool({"shared": stdio_config(), "mine": stdio_config(scope="session")})
    await pool.start()
    try:
        assert list(pool.process_tools()) == ["mcp:shared"]
        first = await pool.open_session("s1")
        second = await pool.open_session("s2")
        assert list(first.tools()) == ["mcp:mine"] and first.failures == {}
        shared_pid = await pid_of(executor_for(pool.process_tools()))
        first_pid = await pid_of(executor_for(first.tools()))
        second_pid = await pid_of(executor_for(second.tools()))
        assert len({shared_pid, first_pid, second_pid}) == 3
        assert all(map(pid_alive, (shared_pid, first_pid, second_pid)))

        await first.close()
        assert not pid_alive(first_pid), "the session's server process is gone (reaped, not a zombie)"
        assert pid_alive(second_pid) and pid_alive(shared_pid)
    finally:
        await pool.close()
    assert not pid_alive(second_pid) and not pid_alive(shared_pid)


async def test_a_call_after_close_fails_without_restarting() -> None:
    server = McpServerTools("weather", stdio_config(scope="session"))
    await server.connect()
    tool = next(t for t in server.tools if t.name == "server_pid")
    pid = int((await tool.invoke({})).text)
    await server.close()
    assert not pid_alive(pid)
    result = await tool.invoke({})
    assert not result.success and result.error == "MCP server 'weather' could not run server_pid: it is closed"


async def test_cancelled_session_start_leaves_no_process() -> None:
    pool = McpServerPool(
        {"mine": stdio_config(scope="session"), "slow": stdio_config(command="sleep", args=["30"], scope="session")}
    )
    before = set(_child_pids())
    opening = asyncio.create_task(pool.open_session("s1"))
    await asyncio.sleep(2.0)  # "mine" has started by now; "slow" never answers
    children = set(_child_pids()) - before
    assert len(children) == 2, "the session's servers are running"
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert not any(map(pid_alive, children))
    assert not pool._sessions
    await pool.close()


async def test_allow_and_exclude_lists() -> None:
    server = McpServerTools(
        "weather", stdio_config(tools=["get_*", "forecast", "book_table", "nothing_like_this"], exclude=["book_*"])
    )
    await server.connect()
    try:
        assert sorted(tool.name for tool in server.tools) == ["forecast", "get_weather"]
        refused = await server.call_tool("book_table", {"restaurant": "X"})
        assert refused.error == "the tool book_table of MCP server 'weather' is turned off in the config"
        executor = executor_for({"mcp:weather": server.tools})
        unknown = await call(executor, "server_pid")
        assert not unknown.success and "there is no tool named server_pid" in unknown.text
    finally:
        await server.close()


async def test_timeouts_and_a_crash_mid_session_then_restart() -> None:
    server = McpServerTools("weather", stdio_config(timeout=1))
    await server.connect()
    try:
        pid = int((await server.call_tool("server_pid", {})).text)
        started = time.perf_counter()
        slow = await server.call_tool("slow", {"seconds": 5})
        assert slow.error == "MCP server 'weather' did not answer slow within 1 s"
        assert time.perf_counter() - started < 2
        assert (await server.call_tool("get_weather", {"city": "Paris"})).success, "a timeout keeps the connection"

        crashed = await server.call_tool("crash", {})
        assert crashed.error == (
            "MCP server 'weather' could not run crash: Connection closed: the server process "
            "exited (or closed its stdout)"
        )
        assert not pid_alive(pid)
        again = await server.call_tool("server_pid", {})
        assert again.success, again.text
        assert int(again.text) != pid, "the next call started a new process"
    finally:
        await server.close()


async def test_executor_timeout_cancels_the_call() -> None:
    server = McpServerTools("weather", stdio_config())
    await server.connect()
    try:
        executor = executor_for({"mcp:weather": server.tools}, ToolPolicy(timeout=0.5))
        result = await call(executor, "slow", '{"seconds": 5}')
        assert result.text == "Error: slow did not answer within 0.5 s"
        assert (await server.call_tool("get_weather", {"city": "Paris"})).success
    finally:
        await server.close()


def test_result_conversion_covers_every_content_kind() -> None:
    from mcp.types import (
        CallToolResult,
        EmbeddedResource,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    resource = EmbeddedResource(resource=TextResourceContents(uri="file:///notes.txt", text="note text"))
    link = ResourceLink(uri="https://example.com/report", name="report")
    result = call_result(
        CallToolResult(content=[TextContent(text="a"), resource, link], structured_content={"ignored": True})
    )
    assert result.text == "a\nnote text\n[link report: https://example.com/report]"
    assert call_result(CallToolResult(content=[], is_error=True)).text == (
        "Error: the tool reported an error without a message"
    )
    assert call_result(CallToolResult(content=[])).text == ""


def _child_pids() -> list[int]:
    import os
    from pathlib import Path

    me = os.getpid()
    pids = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            pids.append(int(status.parent.name))
    return pids
