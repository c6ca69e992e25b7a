"""Configuration of third-party MCP servers as a tool source.

The shape is the `mcpServers` mapping desktop MCP clients use, so a server's entry can be
pasted in: a name, then either a program to run over stdio (`command`, `args`, `env`, `cwd`)
or a server to reach over HTTP (`url`, `headers`, `transport`). vixio adds `scope`, `enabled`,
`timeout`, `startup_timeout` and the `tools` / `exclude` lists.

    weather:
      command: uvx
      args: [mcp-weather]
    search:
      url: https://search.example.com/mcp
      headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
      scope: session
      exclude: [admin_*]
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    field_validator,
)
from pydantic_core import PydanticCustomError

from vixio.core.settings import StrictModel

McpScope = Literal["process", "session"]

# Spellings of the HTTP transport other MCP clients write (`type: http` in Claude Code and VS Code).
_TRANSPORT_SPELLINGS = {
    "streamable-http": "streamable-http",
    "streamable_http": "streamable-http",
    "streamablehttp": "streamable-http",
    "http": "streamable-http",
    "sse": "sse",
}


class _McpServerCommon(StrictModel):
    scope: McpScope = "process"
    """process: started once with the server and shared by every session; session: a fresh connection (and, for a command, a fresh process) per device session, stopped when the session ends."""
    enabled: bool = True
    """false keeps the entry but neither starts nor offers the server."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one tool call may take (the tools policy's timeout also applies)."""
    startup_timeout: float = Field(default=60.0, gt=0)
    """Seconds to start or reach the server, complete the MCP handshake and list its tools (npx/uvx may download on first start)."""
    tools: list[str] | None = None
    """Offer only these of the server's tools (names or shell-style patterns); null offers all."""
    exclude: list[str] = Field(default_factory=list)
    """Never offer these tools (names or shell-style patterns); wins over `tools`."""


class McpStdioServerConfig(_McpServerCommon):
    """An MCP server vixio runs as a child process, speaking MCP on its stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    """Optional; accepted because some clients write it."""
    command: str = Field(min_length=1)
    """The program, e.g. "npx", "uvx" or "/usr/local/bin/my-server" (looked up on PATH)."""
    args: list[str] = Field(default_factory=list)
    """Its command-line arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables. The child inherits only HOME, LOGNAME, PATH, SHELL, TERM and USER from vixio, so API keys must be passed here (use ${VAR})."""
    cwd: str | None = None
    """Working directory of the child; null keeps vixio's."""


class McpHttpServerConfig(_McpServerCommon):
    """An MCP server vixio reaches over HTTP."""

    url: str = Field(pattern=r"^https?://")
    """The endpoint, e.g. http://127.0.0.1:8000/mcp."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every request, e.g. {Authorization: "Bearer ${TOKEN}"}."""
    transport: Literal["streamable-http", "sse"] = Field(
        default="streamable-http", validation_alias=AliasChoices("transport", "type")
    )
    """streamable-http (also written "http"), or sse for servers that only speak the older HTTP+SSE transport. `type` is accepted as another name for this key."""

    @field_validator("transport", mode="before")
    @classmethod
    def _known_spelling(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _TRANSPORT_SPELLINGS.get(value.strip().lower().replace(" ", ""), value)
        return value


def _server_kind(value: Any) -> str | None:
    if isinstance(value, McpStdioServerConfig):
        return "stdio"
    if isinstance(value, McpHttpServerConfig):
        return "http"
    if isinstance(value, dict):
        return "stdio" if "command" in value else "http" if "url" in value else None
    return None


def _command_or_url(value: Any) -> Any:
    """Names the problem when an entry has neither `command` nor `url`, or both."""
    if not isinstance(value, dict):
        return value
    has_command, has_url = "command" in value, "url" in value
    if has_command and has_url:
        raise PydanticCustomError(
            "mcp_server_kind",
            "an MCP server has either `command` (a program vixio runs) or `url` (a server it connects to), not both",
        )
    if not has_command and not has_url:
        raise PydanticCustomError(
            "mcp_server_kind",
            "an MCP server needs `command` (a program vixio runs over stdio) or `url` (a streamable-HTTP or SSE "
            "endpoint); got keys: {keys}",
            {"keys": ", ".join(map(str, value)) or "none"},
        )
    return value


McpServerConfig = Annotated[
    Annotated[McpStdioServerConfig, Tag("stdio")] | Annotated[McpHttpServerConfig, Tag("http")],
    Discriminator(
        _server_kind,
        custom_error_type="mcp_server_kind",
        custom_error_message="an MCP server must be a mapping with `command` or `url`",
    ),
    BeforeValidator(_command_or_url),
]
"""One MCP server: stdio when it has `command`, HTTP when it has `url`."""

McpServersConfig = dict[Annotated[str, Field(min_length=1)], McpServerConfig]
"""MCP servers by name; the name shows in logs and keeps equal tool names of two servers apart."""

__all__ = ["McpHttpServerConfig", "McpScope", "McpServerConfig", "McpServersConfig", "McpStdioServerConfig"]
