"""ToolConverterBase: from `ToolDefinition`s to an agent framework's tool objects (docs/tool-systems.md §1.3).

Each agent provider ships its own converter (openai-agents: FunctionTool). Conversion is by
source, as in the seed; every converted tool runs through the session's `ToolExecutor`, so
policy, name mapping, argument checks and timeouts are the same whatever the framework.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from vixio.core.tools.types import ToolDefinition


class ToolConverterBase(ABC):
    @abstractmethod
    def convert_device_tool(self, tool_def: ToolDefinition) -> Any:
        """A device tool (MCP or registerTools) as a framework tool."""

    @abstractmethod
    def convert_local_tool(self, func: Callable[..., Any] | ToolDefinition) -> Any:
        """A local function (or its definition) as a framework tool."""

    @abstractmethod
    def convert_mcp_tool(self, tool_def: ToolDefinition) -> Any:
        """A third-party MCP server's tool as a framework tool."""

    def convert(self, tool_def: ToolDefinition) -> Any:
        if tool_def.source == "local":
            return self.convert_local_tool(tool_def)
        if tool_def.source == "mcp":
            return self.convert_mcp_tool(tool_def)
        return self.convert_device_tool(tool_def)

    def convert_all(self, tool_defs: Sequence[ToolDefinition]) -> list[Any]:
        return [self.convert(tool_def) for tool_def in tool_defs]

    def convert_device_tools(self, tool_defs: Sequence[ToolDefinition]) -> list[Any]:
        return [self.convert_device_tool(tool_def) for tool_def in tool_defs]
