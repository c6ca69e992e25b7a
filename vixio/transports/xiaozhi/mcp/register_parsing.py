"""The entries of an `mcp/registerTools` request → ToolDefinitions, with the ones skipped and why.

Each entry is checked against the session's limits (`core/tools/limits.py`: name, description,
schema size and depth, `$ref`, patterns) and its schema structurally (`core/tools/schema_check.py`,
microseconds per tool); `main_type: "local"` names a tool the server provides (docs/tool-systems.md §3).
`parse_tools_in_slices` is what the client uses: hundreds of entries yield to the event loop
every few, so one registration never holds up the other sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vixio.core.cooperative import map_in_slices
from vixio.core.tools.limits import ToolLimitsConfig, tool_problem
from vixio.core.tools.schema_check import SchemaProblem, check_tool_schema
from vixio.core.tools.types import EMPTY_SCHEMA, SubType, ToolDefinition

ServerTools = Callable[[str], "ToolDefinition | None"]
"""A server-side tool by name (for `main_type: "local"` entries), or None."""


def parse_tools(
    entries: list[Any],
    *,
    client: Any = None,
    limits: ToolLimitsConfig | None = None,
    server_tools: ServerTools | None = None,
) -> tuple[list[ToolDefinition], list[dict[str, Any]]]:
    """`params.tools` → ToolDefinitions, and the entries skipped with why (`{"index", "name",
    "reason"}`). main_type "local" names a tool the *server* provides (docs/tool-systems.md §3): it maps to the
    server's tool of that name (returned as that definition, not run on the client) when
    `server_tools` knows one, else it is skipped. A tool beyond `limits` (name, description,
    schema size or depth, `$ref`, pattern) is skipped with the limit named."""
    parser = _ToolParser(client, limits or ToolLimitsConfig(), server_tools)
    for index, entry in enumerate(entries):
        parser.add(index, entry)
    return parser.accepted, parser.skipped


async def parse_tools_in_slices(
    entries: list[Any],
    *,
    client: Any = None,
    limits: ToolLimitsConfig | None = None,
    server_tools: ServerTools | None = None,
) -> tuple[list[ToolDefinition], list[dict[str, Any]]]:
    """`parse_tools`, yielding to the event loop every few entries: hundreds of tools from one
    client must not hold up every other session."""
    parser = _ToolParser(client, limits or ToolLimitsConfig(), server_tools)
    await map_in_slices(lambda item: parser.add(*item), enumerate(entries))
    return parser.accepted, parser.skipped


class _ToolParser:
    def __init__(self, client: Any, limits: ToolLimitsConfig, server_tools: ServerTools | None) -> None:
        self.client, self.limits, self.server_tools = client, limits, server_tools
        self.accepted: list[ToolDefinition] = []
        self.skipped: list[dict[str, Any]] = []
        self._seen: set[str] = set()

    def add(self, index: int, entry: Any) -> None:
        name = entry.get("name") if isinstance(entry, dict) else None
        name = name[: self.limits.name_chars] if isinstance(name, str) else ""
        try:
            tool = _parse_tool(entry, self.client, self.limits, self.server_tools)
            if tool.name in self._seen:
                raise ValueError("the name is registered twice; the first one is kept")
        except ValueError as exc:
            self.skipped.append({"index": index, "name": name, "reason": str(exc)})
            return
        self._seen.add(tool.name)
        self.accepted.append(tool)


def _parse_tool(
    entry: Any, client: Any, limits: ToolLimitsConfig, server_tools: ServerTools | None = None
) -> ToolDefinition:
    if not isinstance(entry, dict):
        raise ValueError(f"a tool must be an object, not {type(entry).__name__}")
    name, description = entry.get("name"), entry.get("description")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("name must be a non-empty string")
    if not isinstance(description, str):
        raise ValueError("description must be a string")
    problem = tool_problem(name, description, entry.get("parameters", entry.get("inputSchema")), limits)
    if problem is not None:
        raise ValueError(problem)
    main_type = entry.get("main_type", "remote")
    if main_type not in ("remote", "local"):
        raise ValueError(f'main_type must be "remote" or "local", not {main_type!r}')
    if main_type == "local":
        server_tool = server_tools(name) if server_tools is not None else None
        if server_tool is None:
            raise ValueError(
                f'main_type "local" names a tool the server provides, and this server has no tool named {name!r}'
            )
        return server_tool
    sub_type: SubType = entry.get("sub_type", "query")
    if sub_type not in ("control", "query"):
        raise ValueError(f'sub_type must be "control" or "query", not {sub_type!r}')
    parameters = entry.get("parameters", entry.get("inputSchema"))
    return ToolDefinition(
        name=name,
        description=description,
        parameters=_parameters(parameters),
        source="register",
        sub_type=sub_type,
        client=client,
    )


def _parameters(schema: Any) -> dict[str, Any]:
    if schema is None:
        return dict(EMPTY_SCHEMA)
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ValueError('parameters must be a JSON Schema object with "type": "object"')
    if not isinstance(schema.get("properties", {}), dict):
        raise ValueError("parameters.properties must be an object")
    complete: dict[str, Any] = {"type": "object", "properties": {}, **schema}
    try:
        # Microseconds per tool (jsonschema's metaschema check took ~6 ms: 600 tools stalled every session).
        check_tool_schema(complete)
    except SchemaProblem as exc:
        raise ValueError(f"parameters is not a valid JSON Schema: {exc}") from exc
    return complete
