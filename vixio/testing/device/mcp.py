"""The device-side MCP server of the simulated device (docs/xiaozhi-protocol.md §5, FW `main/mcp_server.cc`).

The device is the MCP *server*; the backend calls it with JSON-RPC 2.0 wrapped in
`{"type":"mcp","payload":...}`. Firmware quirks kept on purpose:

- a request whose `id` is not a JSON number, or whose `jsonrpc` is not "2.0", is dropped
  without a reply;
- error replies are `{"message": ...}` with no `code`;
- `tools/list` pages are at most 8000 bytes and `nextCursor` is the next tool's *name*;
- arguments of the wrong JSON type count as missing (tools.py checks them).

The tools themselves (the firmware's, `DeviceTool`, argument checks, result text) are tools.py.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from loguru import logger

from vixio.testing.device.tools import (
    DeviceTool,
    McpToolResult,
    ToolArgumentError,
    compact_json,
    result_text,
    validate_arguments,
)

__all__ = ["DeviceMcpServer", "McpStats"]

MAX_TOOLS_PAGE_BYTES = 8000
"""`tools/list` reply size limit; the firmware keeps 30 bytes of slack for the closing part."""
MCP_PROTOCOL_VERSION = "2024-11-05"


@dataclass
class McpStats:
    """What the device's MCP server saw, for assertions."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    """Every MCP payload received, in order (including dropped ones)."""
    dropped: int = 0
    """Requests dropped without a reply (bad `jsonrpc`, `method`, `params` or non-number `id`)."""
    notifications: int = 0
    vision: dict[str, Any] | None = None
    """`initialize` `params.capabilities.vision`, when the server sent it."""

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form for recordings."""
        return asdict(self)


class DeviceMcpServer:
    """Answers MCP requests the way firmware 2.4.2 does.

    `send` delivers one JSON-RPC payload to the server (the device wraps it). Tool calls
    run in their own tasks so a slow or never-answering tool does not block the channel.
    """

    def __init__(
        self,
        tools: list[DeviceTool],
        *,
        board: str,
        firmware_version: str,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        device_id: str = "-",
    ) -> None:
        """Serve `tools` (duplicates by name are skipped, as `AddTool` does)."""
        self._log = logger.bind(component="SimulatedDevice", device=device_id)
        self.tools: list[DeviceTool] = []
        for tool in tools:
            if any(t.name == tool.name for t in self.tools):
                self._log.warning("MCP tool {} already added; skipped", tool.name)
                continue
            self.tools.append(tool)
        self._board = board
        self._firmware_version = firmware_version
        self._send = send
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = McpStats()

    async def handle(self, payload: Any) -> None:
        """Handle one MCP payload; replies to everything but tool calls before returning."""
        self.stats.requests.append(payload)
        if not isinstance(payload, dict) or payload.get("jsonrpc") != "2.0":
            return self._drop('jsonrpc is not "2.0"', payload)
        method = payload.get("method")
        if not isinstance(method, str):
            return self._drop("method missing", payload)
        if method.startswith("notifications"):
            self.stats.notifications += 1
            return None
        has_params = "params" in payload
        params = payload.get("params")
        if has_params and not isinstance(params, dict):
            return self._drop("params is not an object", payload)
        request_id = payload.get("id")
        if not isinstance(request_id, int | float) or isinstance(request_id, bool):
            return self._drop("id is not a number", payload)
        rid = int(request_id)  # the firmware uses cJSON valueint
        params = params or {}
        if method == "initialize":
            capabilities = params.get("capabilities")
            if isinstance(capabilities, dict) and isinstance(capabilities.get("vision"), dict):
                self.stats.vision = capabilities["vision"]
            await self._reply(
                rid,
                {
                    "protocolVersion": MCP_PROTOCOL_VERSION,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": self._board, "version": self._firmware_version},
                },
            )
        elif method == "tools/list":
            cursor = params.get("cursor")
            with_user = params.get("withUserTools") is True
            await self._list_tools(rid, cursor if isinstance(cursor, str) else "", with_user)
        elif method == "tools/call":
            await self._call_tool(rid, params if has_params else None)
        else:
            await self._error(rid, f"Method not implemented: {method}")
        return None

    async def close(self) -> None:
        """Cancel tool calls still running."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def notify_tools_changed(self) -> None:
        """Send `notifications/tools/list_changed` (firmware 2.4.2 never does; newer MCP servers do)."""
        await self._send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    @property
    def pending_calls(self) -> int:
        """Tool calls still running."""
        return len(self._tasks)

    def _drop(self, why: str, payload: Any) -> None:
        self.stats.dropped += 1
        self._log.warning("MCP request dropped ({}): {}", why, compact_json(payload)[:200])

    async def _reply(self, rid: int, result: dict[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "id": rid, "result": result})

    async def _error(self, rid: int, message: str) -> None:
        # No "code": the firmware's ReplyError writes only the message.
        await self._send({"jsonrpc": "2.0", "id": rid, "error": {"message": message}})

    async def _list_tools(self, rid: int, cursor: str, with_user: bool) -> None:
        # Same budget as the firmware: the reply text so far + the tool + 30 bytes must fit 8000.
        used = len(compact_json({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}}).encode())
        page: list[dict[str, Any]] = []
        next_cursor = ""
        found = cursor == ""
        for tool in self.tools:
            if not found:
                if tool.name != cursor:
                    continue
                found = True
            if tool.user_only and not with_user:
                continue
            entry = compact_json(tool.to_json()).encode()
            if used + len(entry) + 1 + 30 > MAX_TOOLS_PAGE_BYTES:
                next_cursor = tool.name
                break
            used += len(entry) + 1
            page.append(tool.to_json())
        if not page and next_cursor:
            await self._error(rid, f"Failed to add tool {next_cursor} because of payload size limit")
            return
        result: dict[str, Any] = {"tools": page}
        if next_cursor:
            result["nextCursor"] = next_cursor
        await self._reply(rid, result)

    async def _call_tool(self, rid: int, params: dict[str, Any] | None) -> None:
        if params is None:
            return await self._error(rid, "Missing params")
        name = params.get("name")
        if not isinstance(name, str):
            return await self._error(rid, "Missing name")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            return await self._error(rid, "Invalid arguments")
        tool = next((t for t in self.tools if t.name == name), None)
        if tool is None:
            return await self._error(rid, f"Unknown tool: {name}")
        try:
            values = validate_arguments(tool, arguments)
        except ToolArgumentError as exc:
            return await self._error(rid, str(exc))
        task = asyncio.create_task(self._run_tool(rid, tool, values), name=f"mcp-tool-{name}-{rid}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return None

    async def _run_tool(self, rid: int, tool: DeviceTool, values: dict[str, Any]) -> None:
        try:
            result = tool.handler(values)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the firmware replies with the exception text
            self._log.info("MCP tool {} failed: {!r}", tool.name, exc)
            await self._safe(self._error(rid, str(exc)))
            return
        if isinstance(result, McpToolResult):
            await self._safe(self._reply(rid, result.to_json()))
            return
        content = [{"type": "text", "text": result_text(result)}]
        await self._safe(self._reply(rid, {"content": content, "isError": False}))

    async def _safe(self, sending: Awaitable[None]) -> None:
        try:
            await sending
        except Exception as exc:  # the channel closed while the tool ran
            self._log.info("MCP reply not sent: {!r}", exc)
