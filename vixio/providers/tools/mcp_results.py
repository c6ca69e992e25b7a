"""Results and errors of third-party MCP servers, as text the model and people can read.

Works with the `mcp` SDK's models in both majors (snake_case fields in 2.x, camelCase in 1.x).
"""

from __future__ import annotations

import json
from typing import Any

from vixio.core.tools.types import ToolCallResult

CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
"""JSON-RPC codes the `mcp` client uses for a closed connection and a request timeout."""


def call_result(result: Any) -> ToolCallResult:
    """An MCP `CallToolResult` as a vixio result: text blocks joined by newlines, other blocks as
    short placeholders, structured content as JSON when there is no text; `isError` fails."""
    blocks = list(result.content or [])
    parts = [_block_text(block) for block in blocks]
    has_text = any(
        getattr(block, "type", "") == "text" or getattr(getattr(block, "resource", None), "text", None)
        for block in blocks
    )
    structured = model_field(result, "structured_content", "structuredContent")
    if structured is not None and not has_text:
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":"), default=str))
    text = "\n".join(part for part in parts if part)
    if model_field(result, "is_error", "isError"):
        return ToolCallResult.fail(text or "the tool reported an error without a message")
    return ToolCallResult.ok(text)


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        data = str(getattr(block, "data", "") or "")
        size = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))  # base64 → bytes
        return f"[{kind} {model_field(block, 'mime_type', 'mimeType')}, {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[link {getattr(block, 'name', '')}: {block.uri}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        return (
            text
            if text is not None
            else f"[resource {resource.uri} ({model_field(resource, 'mime_type', 'mimeType')})]"
        )
    return f"[{kind or 'unknown'} content]"


def model_field(obj: Any, name: str, legacy_name: str) -> Any:
    """A field of an `mcp` model: snake_case in mcp 2.x, camelCase in 1.x."""
    return getattr(obj, name, getattr(obj, legacy_name, None))


def error_code(exc: BaseException) -> int | None:
    """The JSON-RPC code of an `mcp` error (`McpError` in 1.x keeps it in `.error`)."""
    code = getattr(exc, "code", None)
    if code is None:
        code = getattr(getattr(exc, "error", None), "code", None)
    return code if isinstance(code, int) and type(exc).__name__ in ("MCPError", "McpError") else None


def describe_error(exc: BaseException, *, stdio: bool = False) -> str:
    """One line for people: the innermost real error of an exception group, without noise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    code = error_code(exc)
    if code is not None:
        message = str(getattr(exc, "message", None) or getattr(getattr(exc, "error", None), "message", exc))
        if code == CONNECTION_CLOSED and stdio:
            return f"{message}: the server process exited (or closed its stdout)"
        return f"{message} (MCP error {code})"
    if isinstance(exc, FileNotFoundError):
        return "command not found (check `command` and PATH)"
    if isinstance(exc, PermissionError):
        return "permission denied (is the command executable?)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).rstrip(".")
    if type(exc).__name__ == "UserError":  # openai-agents' errors are already sentences for people
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
