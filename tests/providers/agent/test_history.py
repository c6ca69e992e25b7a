"""History helpers: trimming and interruption never separate a tool call from its output."""

from __future__ import annotations

from typing import Any

import pytest

from vixio.providers.agent.base import INTERRUPTED_MARK, mark_interrupted
from vixio.providers.agent.openai_agents.history import (
    drop_unpaired_tool_items,
    message_text,
    replace_last_reply,
    trim_history,
)

pytestmark = pytest.mark.unit


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def reply(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_trim_drops_oldest_whole_turns() -> None:
    items = [user("q1"), reply("a1"), user("q2"), call("c"), output("c"), reply("a2"), user("q3"), reply("a3")]
    assert trim_history(items, 8) == items
    assert trim_history(items, 6) == items[2:]
    assert trim_history(items, 5) == items[6:]  # cutting inside q2's turn would orphan "c"


def test_trim_keeps_an_oversized_last_turn_whole() -> None:
    items = [user("q1"), reply("a1"), user("q2"), call("a"), output("a"), call("b"), output("b"), reply("a2")]
    assert trim_history(items, 3) == items[2:]


def test_unpaired_tool_items_are_dropped() -> None:
    items = [user("q"), call("done"), output("done"), call("running"), output("orphan")]
    assert drop_unpaired_tool_items(items) == items[:3]


def test_replace_last_reply_keeps_tools_and_earlier_turns() -> None:
    items = [user("q1"), reply("a1"), user("q2"), reply("Let me check."), call("c"), output("c"), reply("It is sunny")]
    replaced = replace_last_reply(items, "It is")
    assert replaced is not None
    assert replaced[:2] == items[:2]
    assert replaced[2:] == [
        user("q2"),
        call("c"),
        output("c"),
        {"role": "assistant", "content": f"It is… {INTERRUPTED_MARK}"},
    ]
    assert replace_last_reply([reply("greeting")], "x") is None


def test_interruption_marks() -> None:
    assert mark_interrupted("  Hello there ") == f"Hello there… {INTERRUPTED_MARK}"
    assert mark_interrupted("") == INTERRUPTED_MARK
    assert message_text(reply("abc")) == "abc" and message_text(user("x")) == "x"
