"""The device's JSON-RPC replies as text the model can act on (docs/xiaozhi-protocol.md §5).

Errors never raise: a JSON-RPC `error` (with or without `code`, as the firmware sends it) or an
`isError` result becomes a failure text; every content block is kept, one per line.
"""

from __future__ import annotations

import json
from typing import Any

from vixio.core.tools.types import ToolCallResult


def tool_call_result(tool_name: str, reply: dict[str, Any]) -> ToolCallResult:
    """A `tools/call` reply as the model reads it (errors become failure text, never exceptions)."""
    error = reply.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        text = message if isinstance(message, str) and message else compact(error)
        prefix = f"device error {code}" if isinstance(code, int) and not isinstance(code, bool) else "device error"
        return ToolCallResult.fail(f"{prefix}: {text}")
    result = reply.get("result")
    if not isinstance(result, dict):
        return ToolCallResult.fail(f"the device sent a malformed result for {tool_name}: {compact(result)[:200]}")
    text = content_text(result)
    if result.get("isError") is True:
        return ToolCallResult.fail(text or f"{tool_name} failed on the device")
    return ToolCallResult.ok(text)


def content_text(result: dict[str, Any]) -> str:
    """Every content block as text, one per line; `structuredContent` when there is no content."""
    blocks = result.get("content")
    parts = [_block_text(block) for block in (blocks if isinstance(blocks, list) else [])]
    if not parts and result.get("structuredContent") is not None:
        parts.append(compact(result["structuredContent"]))
    return "\n".join(parts)


def _block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return block if isinstance(block, str) else compact(block)
    kind, data = block.get("type"), block.get("data")
    if kind == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    if kind in ("image", "audio") and isinstance(data, str):
        size = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))  # base64 length, not decoded
        return f"[{kind} {block.get('mimeType') or 'unknown type'}, {size} bytes]"
    # Unknown blocks (one firmware emits {"type":"image","image":"<json>"}) are kept as text.
    text = block.get("text")
    return text if isinstance(text, str) else compact(block)


def compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(value)
