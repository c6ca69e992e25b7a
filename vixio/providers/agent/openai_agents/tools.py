"""OpenAIAgentToolConverter: vixio `ToolDefinition`s → openai-agents `FunctionTool`s (docs/tool-systems.md §1.3).

Device, MCP and registerTools tools become `FunctionTool`s with the source's JSON Schema as is
(`strict_json_schema=False`: device schemas have optional parameters with defaults, which strict
mode rejects). With a session's `ToolExecutor`, every call goes through it — policy, argument
coercion and validation, confirmation, control/query, timeouts, the call record — and the
model gets the result text (errors included, so it can correct itself). A plain Python function
passed to `convert_local_tool` becomes openai-agents' own `function_tool(func)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import FunctionTool, function_tool
from agents.tool_context import ToolContext

from vixio.core.tools.arguments import ArgumentError, normalize_schema, parse_arguments, prepare_arguments
from vixio.core.tools.converter import ToolConverterBase
from vixio.core.tools.executor import ToolExecutor
from vixio.core.tools.types import ToolCallRequest, ToolDefinition


class OpenAIAgentToolConverter(ToolConverterBase):
    def __init__(self, executor: ToolExecutor | None = None) -> None:
        self.executor = executor

    def convert_device_tool(self, tool_def: ToolDefinition) -> FunctionTool:
        return self._function_tool(tool_def)

    def convert_mcp_tool(self, tool_def: ToolDefinition) -> FunctionTool:
        return self._function_tool(tool_def)

    def convert_local_tool(self, func: Callable[..., Any] | ToolDefinition) -> FunctionTool:
        if isinstance(func, ToolDefinition):
            return self._function_tool(func)
        return function_tool(func)

    def _function_tool(self, tool_def: ToolDefinition) -> FunctionTool:
        executor = self.executor
        name = tool_def.name

        async def on_invoke_tool(ctx: ToolContext[Any], input_json: str) -> str:
            if executor is not None:
                call_id = getattr(ctx, "tool_call_id", "") or ""
                result = await executor.execute(ToolCallRequest(call_id=call_id, tool_name=name, raw=input_json))
                return result.text
            try:
                arguments = prepare_arguments(parse_arguments(input_json), tool_def.parameters)
            except ArgumentError as exc:
                return f"Error: {name}: {exc}"
            return (await tool_def.invoke(arguments)).text

        return FunctionTool(
            name=name,
            description=tool_def.description,
            params_json_schema=_object_schema(tool_def.parameters),
            on_invoke_tool=on_invoke_tool,
            strict_json_schema=False,
        )


def _object_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    schema = normalize_schema(parameters)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema
