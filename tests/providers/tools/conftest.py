"""The test MCP server (tests/fixtures/mcp_servers/weather_server.py) over stdio, streamable HTTP
and SSE, as vixio MCP server configs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vixio.config.mcp import McpHttpServerConfig, McpStdioServerConfig

WEATHER_SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_servers" / "weather_server.py"


def stdio_config(**overrides: object) -> McpStdioServerConfig:
    """The weather server as a child process of this Python."""
    return McpStdioServerConfig.model_validate({"command": sys.executable, "args": [str(WEATHER_SERVER)], **overrides})


def pid_alive(pid: int) -> bool:
    """Whether a process exists, zombies included (a zombie still has /proc/<pid>)."""
    return Path(f"/proc/{pid}").exists()


def _serve(flag: str) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(WEATHER_SERVER), flag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("PORT "), f"the HTTP weather server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        for pipe in (process.stdin, process.stdout):
            if pipe:
                pipe.close()


@pytest.fixture(scope="module")
def http_base() -> Iterator[str]:
    """Base URL of the weather server on streamable HTTP (its endpoint is /mcp)."""
    yield from _serve("--http")


@pytest.fixture(scope="module")
def sse_base() -> Iterator[str]:
    """Base URL of the weather server on HTTP+SSE (its endpoint is /sse)."""
    yield from _serve("--sse")


def http_config(url: str, **overrides: object) -> McpHttpServerConfig:
    return McpHttpServerConfig.model_validate({"url": url, **overrides})
