"""The framework-agnostic tool records (docs/tool-systems.md §1.1): what a tool is, one call, one result.

Every tool source (local Python functions, the device's MCP tools, third-party MCP servers,
`mcp/registerTools` clients) produces `ToolDefinition`s; every front end (native function
calling, the VCP and XML text protocols) produces `ToolCallRequest`s; one executor turns a
request into a `ToolCallResult`. Nothing here imports an agent framework.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

ToolSource = Literal["local", "device", "mcp", "register"]
"""Where a tool runs: a server-side function, the device (MCP), a third-party MCP server, or
a client that registered it with `mcp/registerTools`."""

SubType = Literal["control", "query"]
"""control: acts on something and is answered as success at once (the device is not waited
for); query: the model needs the result, so the call is awaited (docs/tool-systems.md §3)."""

CallProtocol = Literal["native", "vcp", "xml"]
"""How the model expressed a call: native function calling, or one of the text protocols."""


class ToolClient(Protocol):
    """Something that runs tools by their original name (a device, an MCP server...)."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult: ...


ToolFunction = Callable[[dict[str, Any]], Awaitable[Any]]
"""A local executor: gets the validated arguments, returns anything (str, or JSON-able)."""

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(slots=True)
class ToolDefinition:
    """One tool as the agent sees it, whatever runs it.

    `name` is what the model calls it. Sources create definitions with their own names
    (`self.audio_speaker.set_volume`); the session's `ToolSet` hands the agent copies whose
    `name` is a safe public name and whose `original_name` keeps the source's name.
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_SCHEMA))
    """JSON Schema of the arguments object."""
    source: ToolSource = "local"
    executor: ToolFunction | None = None
    """Runs a local tool."""
    client: ToolClient | None = None
    """Runs a remote tool by `original_name` (device, MCP server, registerTools client)."""
    original_name: str = ""
    """The name the source knows; empty means the same as `name`."""
    sub_type: SubType | None = None
    """The source's own classification (registerTools); the policy may override it."""
    timeout: float | None = None
    """The source's own limit in seconds (a `tools.local` entry's `timeout`); the policy's
    `timeouts` by name override it, its default `timeout` applies when this is None."""
    is_async: bool = False
    """Runs in the background; the call returns a task handle at once (docs/tool-systems.md §6)."""
    hidden: bool = False
    """Not for the model (MCP `annotations.audience == ["user"]`)."""
    read_only: bool | None = None
    """The source's word on side effects (MCP `annotations.readOnlyHint`); None: not given."""
    origin: str = ""
    """Which server or device offers it (an MCP server's name); part of collision hashing."""

    @property
    def source_name(self) -> str:
        return self.original_name or self.name

    def renamed(self, name: str, description: str) -> ToolDefinition:
        return replace(self, name=name, description=description, original_name=self.source_name)

    async def invoke(self, arguments: dict[str, Any]) -> ToolCallResult:
        """Run the tool once with already validated arguments."""
        if self.executor is not None:
            value = await self.executor(arguments)
            return ToolCallResult.ok(output_text(value))
        if self.client is not None:
            return await self.client.call_tool(self.source_name, arguments)
        return ToolCallResult.fail(f"tool {self.name} has nothing to run it")


@dataclass(slots=True)
class ToolCallRequest:
    """One call the model asked for, however it asked (the one record every front end makes).

    A text protocol that could not parse part of a call still produces a request, with the
    problems in `errors`; the executor then answers the model with them instead of running it.
    """

    call_id: str
    tool_name: str
    """The name the model used (normally the public name; the original is accepted too)."""
    arguments: dict[str, Any] = field(default_factory=dict)
    protocol: CallProtocol = "native"
    raw: str = ""
    """The call exactly as the model wrote it (JSON arguments text, or the markup block)."""
    errors: list[str] = field(default_factory=list)
    source: ToolSource | None = None
    """Filled in when the executor resolves the tool."""
    original_name: str = ""
    """Filled in when the executor resolves the tool."""

    @property
    def public_name(self) -> str:
        return self.tool_name


@dataclass(slots=True)
class ToolCallResult:
    """What the model is told about one call."""

    call_id: str = ""
    success: bool = True
    result: str | None = None
    error: str | None = None
    status: Literal["completed", "failed", "pending"] = "completed"
    """pending: an async tool's task handle, or a control tool still running on the device."""
    duration_ms: float | None = None
    """Milliseconds the call took (docs/tool-systems.md §4.2); set by the executor."""

    @classmethod
    def ok(cls, result: str, call_id: str = "") -> ToolCallResult:
        return cls(call_id=call_id, success=True, result=result)

    @classmethod
    def fail(cls, error: str, call_id: str = "") -> ToolCallResult:
        return cls(call_id=call_id, success=False, error=error, status="failed")

    @property
    def text(self) -> str:
        """The tool output as the model reads it; errors are marked so it can act on them."""
        if self.success:
            return self.result or ""
        return f"Error: {self.error}"


class ToolList(list[ToolDefinition]):
    """A source's whole tool list, naming the source even when it is empty (so an empty list
    clears that source and no other)."""

    def __init__(self, source: ToolSource, tools: Sequence[ToolDefinition] = ()) -> None:
        super().__init__(tools)
        self.source: ToolSource = source


def output_text(value: Any) -> str:
    """A tool's return value as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, ToolCallResult):
        return value.text
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)
