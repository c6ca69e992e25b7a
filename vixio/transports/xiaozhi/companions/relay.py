"""Companions paired with a device that another process holds (`vixio serve --workers N`).

The supervisor hands each connection to a worker before a byte of it is read, so a companion
and the device it names often land on different workers. `CompanionRegistry` (pairing.py) pairs
what it holds itself; for the rest it asks its `CompanionRelay`, which reaches the other
processes (vixio/fleet/companions.py relays over the workers' private sockets):

    companion's worker                               device's worker
    CompanionRegistry ─ relay.pair(companion) ─────► a RemoteCompanion joins the device's host
    RegisterToolsClient.call_tool ◄── execute ────── the device's model calls a companion tool
    companion's socket ◄───────────── message ────── the device's mcp/ai/message stream

A `RemoteCompanion` stands on the device's side for a companion elsewhere: the host offers its
tools and streams to it like to a local companion; calls and messages travel through `CompanionLink`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger

from vixio.core.tools.types import ToolCallResult, ToolDefinition

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.companions.store import CompanionKey
    from vixio.transports.xiaozhi.mcp.register_tools import RegisterToolsClient

MAX_QUEUED_MESSAGES = 256
"""mcp/ai/message notifications waiting to reach a remote companion; past this the oldest go (a
companion whose worker stalls must not hold the device's memory or its replies)."""


class CompanionRelay(Protocol):
    """How a process's `CompanionRegistry` reaches devices and companions held by other processes."""

    async def pair(
        self, companion: RegisterToolsClient, key: CompanionKey, only: str | None = None
    ) -> RemoteHost | None:
        """Pair `companion` (let in, its device not here) with its device elsewhere (on worker
        `only`, else wherever it is); None when no other process holds the device."""
        ...

    def companion_let_in(self, companion: RegisterToolsClient, mac: str) -> None:
        """`companion` may pair with device `mac`: the other processes learn where it waits."""
        ...

    def companion_left(self, companion: RegisterToolsClient) -> None:
        """`companion` left or re-registers: the device elsewhere drops its proxy."""
        ...

    def device_connected(self, mac: str) -> None:
        """A device is here now: companions waiting for it elsewhere may pair."""
        ...

    def device_disconnected(self, host: RegisterToolsClient) -> None:
        """The device left: its remote companions wait for it again."""
        ...


@dataclass(frozen=True, slots=True)
class RemoteHost:
    """The device a companion asked for, held by another process."""

    worker: str
    """The process holding the device."""
    device_session: str
    """The device's session id; "" when it has all the companions it may (not paired)."""


@dataclass(frozen=True, slots=True)
class CompanionLink:
    """Reaches one companion in another process."""

    worker: str
    """The process holding the companion ("w0", "w1", ...; "host-2/w0" in a fleet)."""
    session_id: str
    """The companion's session id there."""
    call: Callable[[str, dict[str, Any], float], Awaitable[ToolCallResult | None]]
    """Runs a tool on the companion: (name, arguments, timeout); None when it is gone there."""
    send: Callable[[dict[str, Any]], Awaitable[bool]]
    """Sends one JSON-RPC notification to the companion; False when it is gone there."""


class RemoteCompanion:
    """A companion held by another process, as the device's host carries it."""

    def __init__(
        self,
        link: CompanionLink,
        device_id: str,
        tools: list[ToolDefinition],
        *,
        call_timeout: float,
        on_gone: Callable[[RemoteCompanion], None],
    ) -> None:
        self.link = link
        self.session_id = link.session_id
        self.device_id = device_id
        self.call_timeout = call_timeout
        self.presented_tools = [replace(tool, client=self) for tool in tools]
        """Already presented by the companion's process (companion_tools.present)."""
        self._on_gone = on_gone
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(MAX_QUEUED_MESSAGES)
        self._sender: asyncio.Task[None] | None = None
        self._failing = False
        self.closed = False

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        result = None if self.closed else await self.link.call(name, arguments, self.call_timeout)
        if result is None:
            self._gone()
            return ToolCallResult.fail(f"{name}: the companion has disconnected")
        return result

    async def send_notification(self, message: dict[str, Any]) -> None:
        """Queue `message` for the companion (in order, without waiting for the other process)."""
        if self.closed:
            return
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(message)
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(
                self._send_forever(), name=f"vixio-relay-{self.session_id[:8]}"
            )

    def close(self) -> None:
        self.closed = True
        if self._sender is not None:
            self._sender.cancel()

    async def _send_forever(self) -> None:
        while True:
            message = await self._queue.get()
            try:
                delivered = await self.link.send(message)
                self._failing = False
            except Exception as exc:  # noqa: BLE001 - the device's stream goes on without this companion
                if not self._failing:  # one line until a message gets through again
                    logger.bind(session=self.session_id).warning(
                        "cannot relay to the companion on {}: {}", self.link.worker, exc
                    )
                self._failing = True
                delivered = True  # unreachable for now (restarting): not proven gone
            if not delivered:
                self._gone()
                return

    def _gone(self) -> None:
        if self.closed:
            return
        self.close()
        with suppress(Exception):
            self._on_gone(self)
