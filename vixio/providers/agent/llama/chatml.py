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

`clock_before_last_turn` then moves the date-and-time sentence after the history, for templates
that allow it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vixio.providers.agent.instructions import split_clock

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


def clock_before_last_turn(messages: list[Message], clock_templates: Sequence[str]) -> list[Message]:
    """The date-and-time sentence moved from the system message to its own system turn just
    before the user's last turn (for templates that render a system turn anywhere, as ChatML does).

    The clock changes every minute; first in the prompt it made llama.cpp evaluate the whole
    conversation again at each new minute (SmolLM2-135M on 2 cores: ~200 prompt tokens a second,
    several seconds with 20 turns of history). After the history, only the last turn is new."""
    if len(messages) < 2 or messages[0]["role"] != "system" or messages[-1]["role"] != "user":
        return messages
    rest, clock = split_clock(messages[0]["content"], clock_templates)
    if not clock:
        return messages
    head = [{"role": "system", "content": rest}] if rest else []
    return [*head, *messages[1:-1], {"role": "system", "content": clock}, messages[-1]]
