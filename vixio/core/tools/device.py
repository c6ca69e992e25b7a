"""DeviceToolClientBase: the tools a connected device offers (docs/tool-systems.md §1.2).

Each transport implements it over its own wire (Xiaozhi: MCP JSON-RPC inside `mcp` messages).
It returns framework-agnostic `ToolDefinition`s; an agent provider's converter turns them
into its own tool objects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from vixio.core.tools.types import ToolCallResult, ToolDefinition

ToolsChangedCallback = Callable[[list[ToolDefinition]], Awaitable[None]]


class DeviceToolClientBase(ABC):
    """One session's client for the tools its device offers."""

    @abstractmethod
    async def initialize(self) -> bool:
        """Handshake and fetch the tool list; False when the device did not answer."""

    @abstractmethod
    async def call_tool(self, tool_name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Call a device tool by its device name and wait for its result (or error)."""

    @abstractmethod
    def get_tool_definitions(self) -> list[ToolDefinition]:
        """The device's tools for the model (user-only tools excluded)."""

    @abstractmethod
    def cancel_all(self) -> None:
        """Fail every pending call now (the session is ending)."""

    @abstractmethod
    def on_mcp_message(self, payload: dict[str, Any]) -> None:
        """A payload from the device (replies to our requests, notifications)."""
