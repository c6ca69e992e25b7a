"""Tool abstractions (docs/tool-systems.md §1): definitions, the call record, the executor.

Core stays free of any agent framework: providers convert `ToolDefinition`s into their own tool
objects (`ToolConverterBase`), transports implement `DeviceToolClientBase`.
"""

from vixio.core.tools.arguments import ArgumentError, coerce_value, prepare_arguments
from vixio.core.tools.context import ToolCallContext
from vixio.core.tools.converter import ToolConverterBase
from vixio.core.tools.device import DeviceToolClientBase
from vixio.core.tools.executor import ToolExecutor
from vixio.core.tools.local import BUILTIN_LOCAL_TOOLS, func_to_tool_definition, get_date, get_time
from vixio.core.tools.names import ToolNameMapper
from vixio.core.tools.policy import ToolPolicy
from vixio.core.tools.toolset import ToolSet
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition, output_text

__all__ = [
    "BUILTIN_LOCAL_TOOLS",
    "ArgumentError",
    "DeviceToolClientBase",
    "ToolCallContext",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolConverterBase",
    "ToolDefinition",
    "ToolExecutor",
    "ToolNameMapper",
    "ToolPolicy",
    "ToolSet",
    "coerce_value",
    "func_to_tool_definition",
    "get_date",
    "get_time",
    "output_text",
    "prepare_arguments",
]
