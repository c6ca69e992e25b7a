"""Tool calls for in-process GGUF models: a grammar-forced call, and calls found in the text.

- **Forced** (`tool_choice` "required" or a tool's name): the tools are listed in the system
  message and the reply is generated under a GBNF grammar (llama.cpp's JSON-schema grammar)
  that only admits `{"name": <one of the tools>, "arguments": <that tool's parameters>}`. Any
  model, even SmolLM2-135M, then produces a call that parses and matches a tool's schema.
- **Auto** (a model whose chat template takes tools: Qwen 2.5/3, Llama 3.x, SmolLM2-1.7B,
  Hermes): the template renders the tools, the model writes its calls in its own format, and
  `parse_tool_calls` reads the common ones: `<tool_call>{...}</tool_call>` blocks (Hermes,
  Qwen; a JSON list inside for SmolLM2; also after some text, which is spoken) and a bare JSON
  call (Llama 3.x, optionally after `<|python_tag|>`), with `arguments` or `parameters`.

The calls become Chat Completions tool-call chunks, so openai-agents runs them as it runs any
model's (through the session's ToolExecutor).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from openai.types.chat import ChatCompletionChunk

Call = tuple[str, str]
"""(tool name, arguments as JSON text)."""

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_TAG = "<tool_call>"
_CALL_OPENINGS = ("<tool_call>", "<|python_tag|>", "{", "[")


def function_specs(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `function` part of each Chat Completions tool (`{"type": "function", "function": ...}`)."""
    return [tool["function"] for tool in tools if tool.get("type") == "function" and "function" in tool]


def forced_call_schema(tools: Sequence[dict[str, Any]], choice: str) -> dict[str, Any]:
    """JSON Schema of one call: any offered tool ("required") or the named one."""
    options = []
    for spec in function_specs(tools):
        if choice not in ("required", spec["name"]):
            continue
        parameters = dict(spec.get("parameters") or {"type": "object", "properties": {}})
        parameters.setdefault("type", "object")
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": spec["name"]}, "arguments": parameters},
                "required": ["name", "arguments"],
            }
        )
    if not options:
        raise ValueError(f"tool_choice {choice!r} names no offered tool")
    return options[0] if len(options) == 1 else {"oneOf": options}


def tools_prompt(tools: Sequence[dict[str, Any]]) -> str:
    """The tools as a system-message section, for templates that cannot render them."""
    lines = [
        'You call exactly one of these tools, answering with JSON {"name": <tool name>, "arguments": {<parameters>}}:'
    ]
    for spec in function_specs(tools):
        parameters = json.dumps((spec.get("parameters") or {}).get("properties", {}), ensure_ascii=False)
        lines.append(f"- {spec['name']}: {spec.get('description', '').strip()} Parameters: {parameters}")
    return "\n".join(lines)


def forced_call(text: str) -> Call:
    """The call in a reply generated under `forced_call_schema`'s grammar."""
    value = json.loads(text)
    return str(value["name"]), json.dumps(value.get("arguments") or {}, ensure_ascii=False)


def parse_tool_calls(text: str, names: Iterable[str]) -> list[Call] | None:
    """The calls written in `text` in one of the formats above, or None when it holds none
    (a call to a tool that was not offered makes the whole text not a call)."""
    known = set(names)
    body = text.strip().removeprefix("<|python_tag|>").strip()
    pieces = _BLOCK.findall(body) if "<tool_call>" in body else [body]
    calls: list[Call] = []
    for piece in pieces:
        try:
            value = json.loads(piece)
        except ValueError:
            return None
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict):
                return None
            name = item.get("name")
            arguments = item.get("arguments", item.get("parameters", {}))
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments or "{}")
                except ValueError:
                    return None
            if name not in known or not isinstance(arguments, dict):
                return None
            calls.append((str(name), json.dumps(arguments, ensure_ascii=False)))
    return calls or None


def may_open_call(text: str) -> bool:
    """Whether a reply starting with `text` may still turn out to be a tool call."""
    head = text.lstrip()
    return any(head.startswith(opening) or opening.startswith(head) for opening in _CALL_OPENINGS) if head else True


def _chunk(delta: dict[str, Any], model: str, finish_reason: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-local",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def call_chunks(calls: Sequence[Call], model: str) -> list[ChatCompletionChunk]:
    """Chat Completions chunks carrying `calls` (what an API streams for tool calls)."""
    deltas = [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "index": index,
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        }
        for index, (name, arguments) in enumerate(calls)
    ]
    return [*(_chunk(delta, model) for delta in deltas), _chunk({}, model, "tool_calls")]


def text_chunk(text: str, model: str) -> ChatCompletionChunk:
    return _chunk({"role": "assistant", "content": text}, model)


async def split_tool_calls(
    chunks: AsyncIterator[ChatCompletionChunk], names: Sequence[str], model: str
) -> AsyncIterator[ChatCompletionChunk]:
    """Pass text through as it streams; a reply that opens like a tool call is held until it
    ends, then sent as tool-call chunks when it parses, else as the text it was. A `<tool_call>`
    after some text (Qwen: "Let me check. <tool_call>...") ends the text there: the rest is held."""
    held = ""
    """Text not sent yet: the whole reply while it may be a call, else a possible tag's start."""
    text_sent = capturing = False
    async for chunk in chunks:
        delta = chunk.choices[0].delta if chunk.choices else None
        text = delta.content if delta is not None else None
        if not text:
            if not (chunk.choices and chunk.choices[0].finish_reason is not None):
                yield chunk  # the reply's end is decided below, once the whole reply is known
            continue
        held += text
        if capturing or (not text_sent and may_open_call(held)):
            continue
        tag = held.find(_TAG)
        if tag >= 0:
            capturing = True
        cut = tag if tag >= 0 else len(held) - _tag_start_length(held)
        if cut > 0:
            text_sent = True
            yield text_chunk(held[:cut], model)
            held = held[cut:]
    calls = parse_tool_calls(held, names) if held and (capturing or not text_sent) else None
    if calls:
        for chunk in call_chunks(calls, model):
            yield chunk
        return
    if held:
        yield text_chunk(held, model)
    yield _chunk({}, model, "stop")


def _tag_start_length(text: str) -> int:
    """Length of the longest end of `text` that may begin a `<tool_call>` tag."""
    return next((n for n in range(min(len(_TAG) - 1, len(text)), 0, -1) if _TAG.startswith(text[-n:])), 0)
