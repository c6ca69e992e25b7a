"""How a registerTools client's `mcp/registerTools` request is taken: checked, limited, answered.

A registration is refused (JSON-RPC -32602) when its params are not an object with a tools array
or its `mac_addr` is not a device id, and (-32001, naming the config key) past
`registrations_per_minute` on this connection or over all the Device-Id's connections
(`device_rate`, vixio/state/limits.py), or past the session's tool budget. Registrations take
effect in the order they came (one lock): the tools are parsed a few per loop slice
(register_parsing.py), a companion's are presented as its device's model will read them
(companions/tools.py), the pairing hook runs, and the reply says what was kept, skipped and how
pairing went; then the tools reach whoever listens.

A mixin of `RegisterToolsClient` (register_tools.py), which owns the state named below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from vixio.core.device_ids import DEVICE_ID_CHARACTERS, MAX_DEVICE_ID_CHARS, is_device_id, loggable
from vixio.core.tools.limits import CONFIG_KEY, RateWindow, ToolBudget, ToolLimitsConfig
from vixio.core.tools.types import ToolDefinition, output_text
from vixio.transports.xiaozhi.companions.policy import Credential
from vixio.transports.xiaozhi.companions.tools import companion_label, present_all
from vixio.transports.xiaozhi.mcp.register_parsing import ServerTools, parse_tools_in_slices

if TYPE_CHECKING:
    from loguru import Logger

    from vixio.transports.xiaozhi.companions.pairing import PairingOutcome
    from vixio.transports.xiaozhi.mcp.register_tools import Envelope, RegisterToolsClient, SendPayload

INVALID_PARAMS = -32602
LIMIT_EXCEEDED = -32001
"""JSON-RPC error code of a registration refused by a limit (the message names the config key)."""
SOURCE = "register"
"""This client's name in the session's ToolBudget."""


class Registration:
    """The registration half of `RegisterToolsClient`."""

    limits: ToolLimitsConfig
    mac_addr: str
    device_id: str
    envelope: Envelope
    frame_envelope: Envelope
    registered: bool
    registered_event: asyncio.Event
    credential: Credential
    server_tools: ServerTools | None
    device_rate: Callable[[str], Awaitable[bool]] | None
    on_registered: Callable[[RegisterToolsClient], Awaitable[PairingOutcome | None]] | None
    _send: SendPayload
    _budget: ToolBudget
    _rate: RateWindow
    _refusals_logged: set[str]
    _registering: asyncio.Lock
    _tools: list[ToolDefinition]
    _presented: list[ToolDefinition]
    _generation: int
    _logger: Logger

    if TYPE_CHECKING:  # RegisterToolsClient's

        @property
        def is_companion(self) -> bool: ...

        def _spawn(self, work: Awaitable[None]) -> None: ...

        async def _deliver(self) -> None: ...

    def _on_register(self, payload: dict[str, Any]) -> None:
        request_id = payload.get("id")
        envelope = self.frame_envelope
        params = payload.get("params")
        tools = params.get("tools") if isinstance(params, dict) else None
        if not isinstance(params, dict) or not isinstance(tools, list):
            self._logger.warning("refused a registration: params.tools is not a list: {}", _excerpt(params))
            self._spawn(
                self._answer(
                    request_id,
                    envelope,
                    error={"code": INVALID_PARAMS, "message": "params must be an object with a tools array"},
                )
            )
            return
        mac_addr = params.get("mac_addr")
        if mac_addr not in (None, "") and not is_device_id(mac_addr):  # it is logged and names a device
            self._logger.warning("refused a registration: mac_addr {} is not a device id", loggable(mac_addr))
            self._spawn(
                self._answer(
                    request_id,
                    envelope,
                    error={
                        "code": INVALID_PARAMS,
                        "message": f"mac_addr must be a device's MAC, e.g. aa:bb:cc:dd:ee:ff "
                        f"({DEVICE_ID_CHARACTERS}, at most {MAX_DEVICE_ID_CHARS})",
                    },
                )
            )
            return
        refusal = self._limit_refusal(len(tools))
        if refusal is not None:
            self._spawn(
                self._answer(
                    request_id, envelope, error={"code": LIMIT_EXCEEDED, "message": f"registration refused: {refusal}"}
                )
            )
            return
        self._spawn(self._register(request_id, envelope, tools, params))

    async def _register(self, request_id: Any, envelope: Envelope, tools: list[Any], params: dict[str, Any]) -> None:
        async with self._registering:  # registrations take effect in the order they came
            if self.device_rate is not None and not await self.device_rate(self.device_id):
                limit = self.limits.registrations_per_minute
                refusal = (
                    f"more than {limit} registrations in a minute from {self.device_id} over all its "
                    f"connections; {CONFIG_KEY}.registrations_per_minute is {limit}"
                )
                self._log_refusal("device-rate", refusal)
                await self._answer(
                    request_id, envelope, error={"code": LIMIT_EXCEEDED, "message": f"registration refused: {refusal}"}
                )
                return
            mac_addr = params.get("mac_addr")
            if isinstance(mac_addr, str):  # a device id (checked on arrival)
                self.mac_addr = mac_addr.strip()
            self.credential = Credential.from_params(params)
            accepted, skipped = await parse_tools_in_slices(
                tools, client=self, limits=self.limits, server_tools=self.server_tools
            )
            local = [tool for tool in accepted if tool.source != "register"]
            accepted = [tool for tool in accepted if tool.source == "register"]
            # As a paired device's model will read them, a few per loop slice (~1 ms each at worst).
            self._presented = await present_all(accepted, companion_label(self.device_id)) if self.is_companion else []
            self._budget.take(SOURCE, len(accepted))
            if skipped:  # one line for the whole registration, however many entries it skipped
                first = skipped[0]
                self._logger.info(
                    "registerTools: skipped {} of {} tools (first: {}: {})",
                    len(skipped),
                    len(tools),
                    first["name"] or f"#{first['index']}",
                    first["reason"],
                )
            self.envelope = envelope
            self.registered = True
            self._tools = accepted
            self._generation += 1
            names = ", ".join(t.name for t in accepted[:8]) + (
                f", ... ({len(accepted) - 8} more)" if len(accepted) > 8 else ""
            )
            self._logger.info(
                "registered {} tools from {} ({} envelope): {}",
                len(accepted),
                self.mac_addr or "?",
                envelope,
                names or "none",
            )
            count = len(accepted) + len(local)
            message = (
                "Tools were successfully registered."
                if not skipped
                else (
                    f"Registered {count} of {len(tools)} tools; skipped "
                    + "; ".join(f"{s['name'] or '#' + str(s['index'])}: {s['reason']}" for s in skipped)
                    + "."
                )
            )
            result: dict[str, Any] = {"status": "registered", "message": message, "tools": count}
            if local:  # main_type "local": the server's own tool of that name serves it
                result["local"] = [tool.name for tool in local]
            if skipped:
                result["skipped"] = skipped
            client = cast("RegisterToolsClient", self)  # the only class this mixin is part of
            outcome = await self.on_registered(client) if self.on_registered is not None else None
            if outcome is not None:  # it names another device: a companion
                result.update(paired=outcome.paired, pairing=outcome.status, pairing_id=outcome.pairing_id)
                result["message"] += " " + outcome.message
            self.registered_event.set()
            await self._answer(request_id, envelope, result=result, then_deliver=True)

    def _limit_refusal(self, count: int) -> str | None:
        """Why this registration exceeds a limit (logged once per limit and session), or None."""
        refusal: str | None
        if not self._rate.allow():
            key, refusal = (
                "rate",
                (
                    f"more than {self.limits.registrations_per_minute} registrations in a minute; "
                    f"{CONFIG_KEY}.registrations_per_minute is {self.limits.registrations_per_minute}"
                ),
            )
        else:
            key, refusal = "count", self._budget.refusal(SOURCE, count)
        if refusal is not None:
            self._log_refusal(key, refusal)
        return refusal

    def _log_refusal(self, key: str, refusal: str) -> None:
        if key not in self._refusals_logged:
            self._refusals_logged.add(key)
            self._logger.warning("refused a registration: {} (further refusals of this kind are not logged)", refusal)

    async def _answer(
        self,
        request_id: Any,
        envelope: Envelope,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        then_deliver: bool = False,
    ) -> None:
        if request_id is not None:  # a request without an id is a notification: no reply
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
            reply.update({"error": error} if error is not None else {"result": result})
            await self._send(reply, envelope)
        if then_deliver:
            await self._deliver()


def _excerpt(value: Any, limit: int = 120) -> str:
    text = output_text(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
