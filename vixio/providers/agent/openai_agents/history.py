"""Conversation history as openai-agents input items (Responses format), kept as plain dicts.

Item shapes met here: user/assistant messages `{"role": ..., "content": str | [parts]}`
(assistant output messages also carry `"type": "message"`), tool calls
`{"type": "function_call", "call_id", "name", "arguments"}` and their outputs
`{"type": "function_call_output", "call_id", "output"}`.

Constraint behind every function: chat-completions APIs reject a tool call without its output
(and an output without its call), so history is only ever cut at turn boundaries and unpaired
tool items are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vixio.providers.agent.base import mark_interrupted

Item = dict[str, Any]

_TOOL_CALL_TYPES = frozenset({"function_call"})
_TOOL_OUTPUT_TYPES = frozenset({"function_call_output"})


def is_user_message(item: Item) -> bool:
    """A message typed by the user (not a tool output, which has no role)."""
    return item.get("role") == "user" and item.get("type", "message") == "message"


def is_assistant_message(item: Item) -> bool:
    """An assistant text message (easy form or Responses output message)."""
    return item.get("role") == "assistant" and item.get("type", "message") == "message"


def message_text(item: Item) -> str:
    """The text of a message item, whichever content form it uses."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def drop_unpaired_tool_items(items: Sequence[Item]) -> list[Item]:
    """Remove tool calls without an output and outputs without a call (e.g. a cancelled run)."""
    calls = {i.get("call_id") for i in items if i.get("type") in _TOOL_CALL_TYPES}
    outputs = {i.get("call_id") for i in items if i.get("type") in _TOOL_OUTPUT_TYPES}
    paired = calls & outputs
    return [
        i for i in items if i.get("type") not in _TOOL_CALL_TYPES | _TOOL_OUTPUT_TYPES or i.get("call_id") in paired
    ]


def trim_history(items: Sequence[Item], max_items: int) -> list[Item]:
    """Keep at most `max_items`, dropping the oldest whole turns (a turn starts at a user message).

    A single turn longer than `max_items` is kept whole: cutting inside it could separate a tool
    call from its output. A trimmed result starts with a user message.
    """
    items = list(items)
    if len(items) <= max_items:
        return items
    starts = [n for n, item in enumerate(items) if is_user_message(item)]
    if not starts:
        return items
    for start in starts:
        if len(items) - start <= max_items:
            return items[start:]
    return items[starts[-1] :]


def replace_last_reply(items: Sequence[Item], heard_text: str) -> list[Item] | None:
    """The last turn with its assistant text replaced by one interrupted message.

    Tool calls and outputs of that turn stay (the tools did run). Returns None when there is
    no user turn to attach the reply to.
    """
    items = list(items)
    starts = [n for n, item in enumerate(items) if is_user_message(item)]
    if not starts:
        return None
    last = starts[-1]
    turn = [i for i in items[last + 1 :] if not is_assistant_message(i)]
    reply: Item = {"role": "assistant", "content": mark_interrupted(heard_text)}
    return [*items[: last + 1], *turn, reply]
