"""Chat-completions messages flattened for a plain chat template (ChatML and the like).

Small local models ship templates that know only system/user/assistant turns with string
content: they dereference `message.content` (None on an assistant tool-call message) and skip
or mangle `role: "tool"`. So before rendering:

- assistant tool calls become text in the assistant turn: `[called get_weather({"city": "Paris"})]`;
- a tool output becomes a user turn: `[get_weather returned: Paris: sunny]`;
- content parts are joined into one string; `developer` counts as `system`;
- every system message is merged into one, first;
- consecutive turns of one role are merged (templates and models expect alternation);
- empty turns are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

Message = dict[str, str]


def content_text(content: Any) -> str:
    """String content from a str, None or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return str(content)


def _describe_call(call: Mapping[str, Any]) -> str:
    function = call.get("function") or {}
    arguments = function.get("arguments") or ""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"[called {function.get('name', '?')}({arguments})]"


def normalize_messages(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """`{"role", "content": str}` messages any simple chat template renders (rules above)."""
    system: list[str] = []
    turns: list[Message] = []
    tool_names: dict[str, str] = {}

    def add(role: str, text: str) -> None:
        if not text.strip():
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n" + text
        else:
            turns.append({"role": role, "content": text})

    for message in messages:
        role = str(message.get("role", "user"))
        text = content_text(message.get("content"))
        if role in ("system", "developer"):
            if text.strip():
                system.append(text)
        elif role == "assistant":
            calls = list(message.get("tool_calls") or [])
            for call in calls:
                tool_names[str(call.get("id"))] = str((call.get("function") or {}).get("name", "tool"))
            add("assistant", " ".join([text, *map(_describe_call, calls)]).strip())
        elif role in ("tool", "function"):
            name = message.get("name") or tool_names.get(str(message.get("tool_call_id")), "the tool")
            add("user", f"[{name} returned: {text}]")
        else:
            add("user", text)
    head = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    return [*head, *turns]
