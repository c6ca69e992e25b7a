"""RegisterToolsClient: tools a connected client declares with `mcp/registerTools` (docs/tool-systems.md §3).

Unlike the device MCP (the server lists the device's tools), here the client announces its
tools itself and the server calls them. All JSON-RPC 2.0, in either envelope (see
docs/xiaozhi.md, "registerTools clients"):

- client → server request `mcp/registerTools` `{mac_addr, tools: [{name, description,
  parameters, main_type, sub_type}]}` with the client's own id → reply `{status: "registered",
  message, tools: <count>}`, or error -32602 when the params are unusable;
- server → client request `mcp/tool/execute` `{tool_name, tool_input}` with a string id
  `vixio-<session8>-<n>` → the client's `result` (any JSON) or `error {code, message}`;
- server → client notification `mcp/ai/message` `{type: chunk | thought | final, content}`
  (ai_messages.py).

One client per session. It depends on `vixio.core` only: the transport gives it a `send`
function that wraps a payload in the envelope the client used.

Pairing (see pairing.py): a client whose `mac_addr` names another Xiaozhi device is that
device's *companion*. Once it may pair (pairing_policy.py) and the device is connected, the device
session's client (the host) offers the companion's tools with its own (attributed to the
companion: companion_tools.py) and streams its `mcp/ai/message`s to the companion as well. The
registration result says how pairing went (`paired`, `pairing`, `pairing_id`); a later change
(an operator approves or unpairs it) reaches the companion as an `mcp/pairing` notification.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from loguru import logger

from vixio.core.tools.limits import RateWindow, ToolBudget, ToolLimitsConfig
from vixio.core.tools.types import (
    ToolCallResult,
    ToolDefinition,
    ToolList,
    output_text,
)
from vixio.core.transport import ConnectionClosed
from vixio.transports.xiaozhi.companions.policy import Credential
from vixio.transports.xiaozhi.companions.store import normalize_mac
from vixio.transports.xiaozhi.mcp.ai_messages import AiMessageStream
from vixio.transports.xiaozhi.mcp.register_parsing import ServerTools, parse_tools
from vixio.transports.xiaozhi.mcp.registration import SOURCE, Registration

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.companions.pairing import PairingOutcome
    from vixio.transports.xiaozhi.companions.relay import RemoteCompanion

__all__ = ["RegisterToolsClient", "ServerTools", "parse_tools"]

REGISTER_METHOD = "mcp/registerTools"
EXECUTE_METHOD = "mcp/tool/execute"
DEFAULT_CALL_TIMEOUT = 30.0
"""Seconds `call_tool` waits for the client's answer."""

Envelope = Literal["mcp", "bare"]
"""How a client frames JSON-RPC: inside `{"type": "mcp", "payload": …}`, or as the bare object."""
SendPayload = Callable[[dict[str, Any], Envelope], Awaitable[None]]
ToolsCallback = Callable[[list[ToolDefinition]], Awaitable[None]]


class RegisterToolsClient(Registration, AiMessageStream):
    """One session's `mcp/registerTools` client: its tools, calls to them, and the assistant's
    output streamed to it as `mcp/ai/message` notifications once it has registered (ai_messages.py)."""

    def __init__(
        self,
        session_id: str,
        send: SendPayload,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        limits: ToolLimitsConfig | None = None,
        budget: ToolBudget | None = None,
    ) -> None:
        self.session_id = session_id
        self.limits = limits or ToolLimitsConfig()
        self._budget = budget or ToolBudget(self.limits)
        self._rate = RateWindow(self.limits.registrations_per_minute, 60.0)
        self._refusals_logged: set[str] = set()
        self._registering = asyncio.Lock()
        self.call_timeout = call_timeout
        self.mac_addr = ""
        self.envelope: Envelope = "mcp"
        """The envelope of the client's last registration; calls and notifications use it."""
        self.frame_envelope: Envelope = "mcp"
        """Set by the transport before each frame is routed: the envelope that frame came in."""
        self.registered = False
        self.registered_event = asyncio.Event()
        """Set at the first registration (a companion without a hello is served from then on)."""
        self.device_id = ""
        """The Device-Id of this connection (set by the transport): a registration naming
        another MAC makes this client a companion of that device."""
        self.client_id = ""
        """The Client-Id of this connection (set by the transport): with the Device-Id, who an
        operator's approval names."""
        self.credential = Credential()
        """What the latest registration presented for the device it names (the device's token)."""
        self.operator_unpaired = False
        """The operator unpaired this companion: on this connection only an approval pairs it again."""
        self.on_registered: Callable[[RegisterToolsClient], Awaitable[PairingOutcome | None]] | None = None
        """The pairing hook (CompanionRegistry.registered): awaited after each registration."""
        self.server_tools: ServerTools | None = None
        """Looks up server-side tools for `main_type: "local"` entries."""
        self.device_rate: Callable[[str], Awaitable[bool]] | None = None
        """Counts a registration of this Device-Id over all its connections, on every worker and
        instance (vixio/state/limits.py); False when it is over the limit. None: this session only."""
        self.paired_with = ""
        """The session id of the device this companion is paired with; "" when unpaired."""
        self.companions: list[RegisterToolsClient | RemoteCompanion] = []
        """Companions paired with this (device) session's client, here or in another worker
        (pairing_relay.py): their tools join this session's, and its ai/message stream goes to them too."""
        self._send = send
        self._tools: list[ToolDefinition] = []
        self._presented: list[ToolDefinition] = []
        """`_tools` as a paired device's model sees them (companion_tools.present), made at registration."""
        self._on_tools: ToolsCallback | None = None
        self._generation = 0
        self._delivered = 0
        self._id_prefix = f"vixio-{session_id[:8]}-"
        self._ids = itertools.count(1)
        self._pending: dict[str, tuple[str, asyncio.Future[ToolCallResult]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reply: list[str] = []
        """The `chunk` fragments sent for the reply in progress."""
        self._reply_open = False
        self._closed = False
        self._logger = logger.bind(session=session_id, component="register_tools")

    @property
    def tools(self) -> list[ToolDefinition]:
        """The tools of the latest registration (main_type "remote" only), then those of paired
        companions (a name already offered is not offered twice)."""
        tools = list(self._tools)
        names = {tool.name for tool in tools}
        for companion in self.companions:
            for tool in companion.presented_tools:
                if tool.name not in names:
                    names.add(tool.name)
                    tools.append(tool)
        return tools

    @property
    def presented_tools(self) -> list[ToolDefinition]:
        """This companion's tools as a paired device's model sees them (companion_tools.present)."""
        return self._presented

    def attach_companion(self, companion: RegisterToolsClient | RemoteCompanion) -> None:
        if companion not in self.companions:
            self.companions.append(companion)
        self._tools_changed()

    def detach_companion(self, companion: RegisterToolsClient | RemoteCompanion) -> None:
        if companion in self.companions:
            self.companions.remove(companion)
            self._tools_changed()

    def _tools_changed(self) -> None:
        self._generation += 1
        if not self._closed:
            self._spawn(self._deliver())

    # --- routing (SelectiveMcpPeer) -----------------------------------------------------------

    def accepts(self, payload: dict[str, Any]) -> bool:
        """Registrations, and replies to this client's own string ids (late ones included)."""
        if "method" in payload:
            return payload.get("method") == REGISTER_METHOD
        call_id = payload.get("id")
        return isinstance(call_id, str) and call_id.startswith(self._id_prefix)

    def on_mcp_message(self, payload: dict[str, Any]) -> None:
        if payload.get("method") == REGISTER_METHOD:
            self._on_register(payload)
            return
        call_id = payload.get("id")
        name, future = self._pending.get(call_id, ("", None)) if isinstance(call_id, str) else ("", None)
        if future is None or future.done():
            self._logger.info("dropped a reply to {!r}: no call is waiting for it (timed out?)", call_id)
            return
        future.set_result(_call_result(name, payload))

    @property
    def is_companion(self) -> bool:
        """Its registration names a MAC other than this connection's own Device-Id."""
        mac = normalize_mac(self.mac_addr)
        return bool(mac) and mac != normalize_mac(self.device_id)

    async def set_tools_callback(self, callback: ToolsCallback | None) -> None:
        """Who hears about the tools; tools registered before it was set are delivered now."""
        self._on_tools = callback
        await self._deliver()

    async def _deliver(self) -> None:
        if self._on_tools is None or self._delivered == self._generation:
            return
        self._delivered = self._generation
        await self._on_tools(ToolList("register", self.tools))

    # --- calls --------------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Run `name` on the client and wait for its answer (at most `call_timeout` seconds)."""
        if self._closed:
            return ToolCallResult.fail(f"{name}: the client has disconnected")
        if not any(tool.name == name for tool in self._tools):
            return ToolCallResult.fail(f"{name}: the client has not registered this tool")
        call_id = f"{self._id_prefix}{next(self._ids)}"
        future: asyncio.Future[ToolCallResult] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = (name, future)
        request = {
            "jsonrpc": "2.0",
            "id": call_id,
            "method": EXECUTE_METHOD,
            "params": {"tool_name": name, "tool_input": arguments},
        }
        try:
            await self._send(request, self.envelope)
            async with asyncio.timeout(self.call_timeout):
                return await future
        except TimeoutError:
            return ToolCallResult.fail(f"{name}: the client did not answer within {self.call_timeout:g} s")
        except ConnectionClosed:
            return ToolCallResult.fail(f"{name}: the client has disconnected")
        finally:
            self._pending.pop(call_id, None)

    def cancel_all(self) -> None:
        """Fail every pending call now and stop sending (the session is ending)."""
        self._closed = True
        for name, future in self._pending.values():
            if not future.done():
                future.set_result(ToolCallResult.fail(f"{name}: the client disconnected before answering"))
        for task in self._tasks:
            task.cancel()
        self._budget.release(SOURCE)

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except ConnectionClosed:
                pass
            except Exception:
                self._logger.exception("registerTools handling failed")

        task = asyncio.get_running_loop().create_task(run(), name=f"vixio-{self.session_id}-register")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _call_result(name: str, payload: dict[str, Any]) -> ToolCallResult:
    error = payload.get("error")
    if error is not None:
        if isinstance(error, dict):
            return ToolCallResult.fail(
                f"{name} failed on the client ({error.get('code', '?')}): {error.get('message', output_text(error))}"
            )
        return ToolCallResult.fail(f"{name} failed on the client: {output_text(error)}")
    if "result" not in payload:
        return ToolCallResult.fail(f"{name}: the client's reply has neither result nor error")
    return ToolCallResult.ok(output_text(payload["result"]))
