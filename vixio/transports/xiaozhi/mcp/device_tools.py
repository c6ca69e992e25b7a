"""XiaozhiDeviceToolClient: one session's MCP client for the tools its device offers (docs/tool-systems.md §1.2).

The device is the MCP *server*; the backend calls it with JSON-RPC 2.0 inside
`{"type":"mcp","payload":...}` messages on the session's WebSocket. Firmware facts that shape
this client (docs/xiaozhi-protocol.md §5):

- a request whose `id` is not a JSON number is dropped silently, so ids are integers from one
  counter per session;
- error replies carry only `message`, no `code`;
- `tools/list` pages hold at most 8000 bytes; `nextCursor` is the next tool's name and is absent
  (or empty) on the last page;
- the firmware ignores notifications; `notifications/initialized` and `notifications/cancelled`
  are still sent for the other MCP servers that sit behind this channel (xiaozhi-sdk, relays).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from loguru import logger

from vixio import __version__
from vixio.core.log_throttle import LogThrottle
from vixio.core.tools.device import DeviceToolClientBase, ToolsChangedCallback
from vixio.core.tools.limits import ToolBudget, ToolLimitsConfig, tool_problem
from vixio.core.tools.types import EMPTY_SCHEMA, ToolCallResult, ToolDefinition
from vixio.transports.xiaozhi.mcp.replies import compact, tool_call_result

MCP_PROTOCOL_VERSION = "2024-11-05"
"""What the firmware speaks (it answers 2024-11-05 whatever is asked)."""
MAX_LIST_PAGES = 100
"""A device that keeps returning new cursors is cut off here (40 tools take about 4 pages)."""
SOURCE = "device"
"""This client's name in the session's ToolBudget."""

SendPayload = Callable[[dict[str, Any]], Awaitable[None]]


class _DeviceGone(Exception):
    """Set on pending requests when the session ends."""


class _DeviceFailed(Exception):
    """The device answered a handshake or listing request with an error or a malformed result."""


class XiaozhiDeviceToolClient(DeviceToolClientBase):
    """Lists a device's MCP tools and calls them; never raises into the transport.

    `send` delivers one JSON-RPC payload (the transport wraps it as an `mcp` message).
    `on_tools_changed` gets the model-visible definitions each time a listing completes.
    """

    def __init__(
        self,
        session_id: str,
        send: SendPayload,
        *,
        timeout: float = 30.0,
        list_timeout: float = 10.0,
        vision: dict[str, str] | None = None,
        on_tools_changed: ToolsChangedCallback | None = None,
        device_id: str = "",
        limits: ToolLimitsConfig | None = None,
        budget: ToolBudget | None = None,
    ) -> None:
        self.session_id = session_id
        self.limits = limits or ToolLimitsConfig()
        """Bounds on the listed tools (count, name, description, schema); see core/tools/limits.py."""
        self._budget = budget or ToolBudget(self.limits)
        self.device_id = device_id
        self.timeout = timeout
        """Seconds a tool call may take before it fails and is cancelled on the device."""
        self.list_timeout = list_timeout
        """Seconds the device has to answer `initialize` and each `tools/list` page."""
        self.vision = vision or {"url": "", "token": ""}
        """`capabilities.vision` for `initialize`; always sent (xiaozhi-sdk raises KeyError without it)."""
        self.ready = False
        """True once a tool listing completed."""
        self._limits_logged: set[str] = set()
        self._dropped = LogThrottle(first=5, every=10.0)
        self.server_info: dict[str, Any] = {}
        """The device's `serverInfo` from `initialize` (board name, firmware version)."""
        self._send = send
        self._on_tools_changed = on_tools_changed
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._tools: list[ToolDefinition] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listing = asyncio.Lock()
        self._relist_wanted = False
        self._relister: asyncio.Task[None] | None = None
        self._closed = False
        self._log = logger.bind(session=session_id, device=device_id or "-", component="device-tools")

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> asyncio.Task[bool]:
        """Run `initialize()` in the background (the caller never waits for the device)."""
        return self._spawn(self.initialize(), "init")

    async def initialize(self) -> bool:
        async with self._listing:
            try:
                reply = await self._request(
                    "initialize",
                    {
                        "protocolVersion": MCP_PROTOCOL_VERSION,
                        "capabilities": {"vision": dict(self.vision)},
                        "clientInfo": {"name": "vixio", "version": __version__},
                    },
                    self.list_timeout,
                )
                info = _result_of(reply).get("serverInfo")
                self.server_info = info if isinstance(info, dict) else {}
                await self._send_notification("notifications/initialized", None)
                tools = await self._list_tools()
            except Exception as exc:
                self._log.warning("device tools unavailable: {}", _why(exc))
                return False
        self._log.info(
            "device tools ready: {} for the model, {} user-only",
            len(self.get_tool_definitions()),
            len(tools) - len(self.get_tool_definitions()),
        )
        await self._tell_tools_changed()
        return True

    def cancel_all(self) -> None:
        self._closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(_DeviceGone())
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        self._budget.release(SOURCE)

    async def close(self) -> None:
        """`cancel_all()`, then wait until the background tasks have finished."""
        self.cancel_all()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def pending_requests(self) -> int:
        """Requests still waiting for the device's answer."""
        return len(self._pending)

    # --- tools --------------------------------------------------------------------------------

    def get_tool_definitions(self) -> list[ToolDefinition]:
        return [tool for tool in self._tools if not tool.hidden]

    @property
    def all_tools(self) -> list[ToolDefinition]:
        """Every listed tool, user-only ones (hidden) included."""
        return list(self._tools)

    async def call_tool(self, tool_name: str, arguments: dict[str, Any]) -> ToolCallResult:
        if self._closed:
            return ToolCallResult.fail(f"the device disconnected; {tool_name} was not called")
        request_id, future = self._new_request()
        try:
            try:
                await self._send(
                    _request_payload(request_id, "tools/call", {"name": tool_name, "arguments": arguments})
                )
            except Exception as exc:
                return ToolCallResult.fail(f"could not send {tool_name} to the device: {exc}")
            try:
                reply = await asyncio.wait_for(future, self.timeout)
            except TimeoutError:
                await self._cancel_on_device(request_id, f"no result within {self.timeout:g} s")
                return ToolCallResult.fail(f"the device did not answer {tool_name} within {self.timeout:g} s")
            except _DeviceGone:
                return ToolCallResult.fail(f"the device disconnected before answering {tool_name}")
            except asyncio.CancelledError:
                # Barge-in or the executor's deadline: tell the device without waiting here.
                if not self._closed:
                    self._spawn(self._cancel_on_device(request_id, "cancelled by the server"), "cancel")
                raise
        finally:
            self._forget(request_id, future)
        return tool_call_result(tool_name, reply)

    # --- from the device ----------------------------------------------------------------------

    def on_mcp_message(self, payload: dict[str, Any]) -> None:
        if self._closed:
            return
        if not isinstance(payload, dict) or payload.get("jsonrpc") != "2.0":
            self._log_dropped("dropped mcp payload that is not JSON-RPC 2.0: {}", compact(payload)[:200])
            return
        method = payload.get("method")
        if isinstance(method, str):
            self._on_device_message(method, payload)
            return
        request_id = payload.get("id")
        if (
            not isinstance(request_id, int)
            or isinstance(request_id, bool)
            or ("result" not in payload and "error" not in payload)
        ):
            self._log_dropped("dropped malformed mcp reply: {}", compact(payload)[:200])
            return
        future = self._pending.get(request_id)
        if future is None or future.done():
            self._log.debug("ignored a late mcp reply to request {}", request_id)
            return
        future.set_result(payload)

    def _on_device_message(self, method: str, payload: dict[str, Any]) -> None:
        if "id" in payload:
            self._log_dropped("dropped mcp request {!r} from the device: the server serves no methods", method[:40])
        elif method == "notifications/tools/list_changed":
            self._relist_wanted = True
            if self._relister is None or self._relister.done():
                self._relister = self._spawn(self._relist(), "relist")
        elif method.startswith("notifications/"):
            self._log.debug("ignored mcp notification {}", method)
        else:
            self._log_dropped("dropped mcp message with unknown method {!r}", method[:40])

    async def _relist(self) -> None:
        # Several list_changed notifications in a row give one listing; one that arrives during
        # a listing gives another afterwards, so the last list is always current.
        while self._relist_wanted:
            self._relist_wanted = False
            async with self._listing:
                try:
                    await self._list_tools()
                except Exception as exc:
                    self._log.warning("device tools not refreshed: {}", _why(exc))
                    return
            self._log.info("device tools changed: {} for the model", len(self.get_tool_definitions()))
            await self._tell_tools_changed()

    # --- JSON-RPC plumbing --------------------------------------------------------------------

    def _new_request(self) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        return self._next_id, future

    async def _request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send a request and return the device's reply payload; raises on timeout or session end."""
        if self._closed:
            raise _DeviceGone()
        request_id, future = self._new_request()
        try:
            await self._send(_request_payload(request_id, method, params))
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise _DeviceFailed(f"no answer to {method} within {timeout:g} s") from None
        finally:
            self._forget(request_id, future)

    def _forget(self, request_id: int, future: asyncio.Future[dict[str, Any]]) -> None:
        self._pending.pop(request_id, None)
        if future.done() and not future.cancelled():
            future.exception()  # retrieved: a session end racing a failed send is not worth a warning
        else:
            future.cancel()

    async def _send_notification(self, method: str, params: dict[str, Any] | None) -> None:
        payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            payload["params"] = params
        await self._send(payload)

    async def _cancel_on_device(self, request_id: int, reason: str) -> None:
        try:
            await self._send_notification("notifications/cancelled", {"requestId": request_id, "reason": reason})
        except Exception as exc:  # the session is ending; nothing left to cancel
            self._log.debug("notifications/cancelled for {} not sent: {!r}", request_id, exc)

    async def _list_tools(self) -> list[ToolDefinition]:
        tools: list[ToolDefinition] = []
        names: set[str] = set()
        cursor, used = "", {""}
        skipped: list[str] = []
        allowance = self._budget.allowance(SOURCE)
        for _ in range(MAX_LIST_PAGES):
            result = _result_of(
                await self._request("tools/list", {"cursor": cursor, "withUserTools": False}, self.list_timeout)
            )
            entries = result.get("tools")
            for entry in entries if isinstance(entries, list) else []:
                tool = self._definition(entry)
                if tool is None or tool.name in names:
                    skipped.append(f"malformed or repeated: {compact(entry)[:120]}")
                    continue
                problem = tool_problem(tool.name, tool.description, entry.get("inputSchema"), self.limits)
                if problem is not None:
                    skipped.append(f"{tool.name[:64]}: {problem}")
                    continue
                names.add(tool.name)
                tools.append(tool)
            if len(tools) > allowance:
                self._log_limit(
                    "count",
                    f"the device lists more than {allowance} tools; "
                    f"{self._budget.refusal(SOURCE, len(tools))}; kept the first {allowance}",
                )
                tools = tools[:allowance]
                break
            next_cursor = result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                break
            if next_cursor in used:
                self._log.warning("tools/list cursor {!r} came back; stopped listing", next_cursor)
                break
            used.add(next_cursor)
            cursor = next_cursor
        else:
            self._log.warning("tools/list still had more after {} pages; stopped listing", MAX_LIST_PAGES)
        if skipped:
            self._log_limit("skipped", f"skipped {len(skipped)} device tools (first: {skipped[0]})")
        self._budget.take(SOURCE, len(tools))
        self._tools = tools
        self.ready = True
        return tools

    def _log_dropped(self, message: str, *args: object) -> None:
        verdict = self._dropped.hit()
        if verdict == 0:
            self._log.warning(message, *args)
        elif verdict:
            self._log.warning(
                "dropped {} more mcp messages ({} in all); last: " + message, verdict, self._dropped.total, *args
            )

    def _log_limit(self, kind: str, message: str) -> None:
        # Once per kind and session: a device that relists on every list_changed must not flood the log.
        if kind not in self._limits_logged:
            self._limits_logged.add(kind)
            self._log.warning("{} (not logged again for this session)", message)

    def _definition(self, entry: Any) -> ToolDefinition | None:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            return None
        schema = entry.get("inputSchema")
        annotations = entry.get("annotations")
        audience = annotations.get("audience") if isinstance(annotations, dict) else None
        read_only = annotations.get("readOnlyHint") if isinstance(annotations, dict) else None
        description = entry.get("description")
        return ToolDefinition(
            name=entry["name"],
            description=description if isinstance(description, str) else "",
            parameters=schema if isinstance(schema, dict) else dict(EMPTY_SCHEMA),
            source="device",
            client=self,
            hidden=audience == ["user"],
            read_only=read_only if isinstance(read_only, bool) else None,
            origin=self.device_id,
        )

    async def _tell_tools_changed(self) -> None:
        if self._on_tools_changed is None:
            return
        try:
            await self._on_tools_changed(self.get_tool_definitions())
        except Exception:
            self._log.exception("the device tools callback failed")

    def _spawn(self, coroutine: Coroutine[Any, Any, Any], label: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=f"vixio-{self.session_id}-device-tools-{label}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


# --- pure helpers -----------------------------------------------------------------------------


def _request_payload(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _result_of(reply: dict[str, Any]) -> dict[str, Any]:
    if "error" in reply:
        raise _DeviceFailed(tool_call_result("", reply).error or "device error")
    result = reply.get("result")
    if not isinstance(result, dict):
        raise _DeviceFailed(f"malformed result {compact(result)[:200]}")
    return result


def _why(exc: BaseException) -> str:
    if isinstance(exc, _DeviceGone):
        return "the session ended"
    return str(exc) or repr(exc)
