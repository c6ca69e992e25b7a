"""The `mcp_servers` config: desktop-client shape, vixio keys, errors that name the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from vixio.config.mcp import McpHttpServerConfig, McpServersConfig, McpStdioServerConfig

pytestmark = pytest.mark.unit

SERVERS = TypeAdapter(McpServersConfig)
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_servers.yaml"


def errors(data: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    with pytest.raises(ValidationError) as caught:
        SERVERS.validate_python(data)
    return [(tuple(error["loc"]), error["msg"]) for error in caught.value.errors()]


def test_desktop_client_entries_validate_as_they_are() -> None:
    servers = SERVERS.validate_python(
        {
            "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"K": "v"}},
            "claude-code-style": {"type": "stdio", "command": "uvx", "args": ["mcp-x"]},
            "remote": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer t"}},
            "vscode-style": {"type": "http", "url": "https://h/mcp"},
            "cline-style": {"url": "https://h/sse", "transport": "sse"},
            "spelled": {"url": "https://h/mcp", "transport": "streamableHttp"},
        }
    )
    assert isinstance(servers["fs"], McpStdioServerConfig) and servers["fs"].env == {"K": "v"}
    assert isinstance(servers["remote"], McpHttpServerConfig) and servers["remote"].transport == "streamable-http"
    assert servers["vscode-style"].transport == "streamable-http"
    assert servers["cline-style"].transport == "sse"
    assert servers["spelled"].transport == "streamable-http"
    fs = servers["fs"]
    assert (fs.scope, fs.enabled, fs.timeout, fs.startup_timeout, fs.tools, fs.exclude) == (
        "process",
        True,
        30.0,
        60.0,
        None,
        [],
    )


def test_the_example_file_validates() -> None:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    servers = SERVERS.validate_python(data["tools"]["mcp_servers"])
    assert servers["notes"].scope == "session" and servers["legacy"].enabled is False


def test_neither_or_both_of_command_and_url_is_explained() -> None:
    neither = (
        "an MCP server needs `command` (a program vixio runs over stdio) or `url` (a streamable-HTTP or "
        "SSE endpoint); got keys: args"
    )
    both = "an MCP server has either `command` (a program vixio runs) or `url` (a server it connects to), not both"
    assert errors({"x": {"args": ["a"]}}) == [(("x",), neither)]
    assert errors({"x": {"command": "a", "url": "http://h"}}) == [(("x",), both)]
    assert errors({"x": "npx server"}) == [(("x",), "an MCP server must be a mapping with `command` or `url`")]


def test_bad_values_name_the_key() -> None:
    assert errors({"x": {"url": "http://h", "transport": "websocket"}}) == [
        (("x", "http", "transport"), "Input should be 'streamable-http' or 'sse'")
    ]
    assert errors({"x": {"url": "ws://h"}})[0][0] == ("x", "http", "url")
    assert errors({"x": {"command": "a", "scope": "user"}})[0] == (
        ("x", "stdio", "scope"),
        "Input should be 'process' or 'session'",
    )
    assert errors({"x": {"command": "a", "autoApprove": []}})[0] == (
        ("x", "stdio", "autoApprove"),
        "Extra inputs are not permitted",
    )
    assert errors({"x": {"command": ""}})[0][0] == ("x", "stdio", "command")
    assert errors({"x": {"command": "a", "timeout": 0}})[0][0] == ("x", "stdio", "timeout")
