"""Text tool protocols end to end: a model without native function calling uses tools.

The scripted model writes VCP or XML markup into its streamed reply; the voice stack speaks
only the prose around it, runs the call through the session's executor, and sends the result
back as the next user message; the model's reply keeps its markup in the history.
"""

from __future__ import annotations

import asyncio

import pytest

from vixio.config.models import VixioConfig
from vixio.core.chunk import StreamCompleteChunk, TextChunk
from vixio.core.pipeline import Pipeline
from vixio.core.tools.local import func_to_tool_definition
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.voice.stack import VoiceStack

pytestmark = pytest.mark.integration

weather_calls: list[str] = []


async def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city."""
    weather_calls.append(f"{city}/{days}")
    return f"{city}: sunny, 25 C"


CALLS = {
    "vcp": (
        "Let me check. <<<[TOOL_REQUEST]>>>\ntool_name:「始」get_weather「末」,\ncity:「始」Paris「末」,\n"
        "days:「始」2「末」\n<<<[END_TOOL_REQUEST]>>>"
    ),
    "xml": (
        'Let me check. <function_calls>\n<invoke name="get_weather">\n<parameter name="city">Paris'
        '</parameter>\n<parameter name="days">2</parameter>\n</invoke>\n</function_calls>'
    ),
}
RESULT_MARK = {"vcp": "<<<[TOOL_RESULT]>>>", "xml": "<function_results>"}


async def spoken_reply(pipeline: Pipeline) -> list[str]:
    sentences = []
    while True:
        chunk = await asyncio.wait_for(pipeline.get(), 10)
        if isinstance(chunk, TextChunk) and chunk.role == "assistant":
            sentences.append(chunk.text)
        if isinstance(chunk, StreamCompleteChunk):
            return sentences


@pytest.mark.parametrize("protocol", ["vcp", "xml"])
async def test_markup_calls_run_and_only_prose_is_spoken(llm: ScriptedLLMServer, protocol: str) -> None:
    weather_calls.clear()
    llm.expect(Reply.text(CALLS[protocol]), Reply.text("It is sunny in Paris for two days."))
    config = VixioConfig.model_validate(
        {
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "t",
                "tool_protocol": protocol,
            },
            "tools": {"builtin": []},
        }
    )
    voice = VoiceStack(config)
    voice.local_tools.append(func_to_tool_definition(get_weather))
    pipeline = voice.build_pipeline("s1")
    async with pipeline:
        await pipeline.push(TextChunk(text="Weather in Paris?", role="user"))
        assert await spoken_reply(pipeline) == ["Let me check.", "It is sunny in Paris for two days."]

    assert weather_calls == ["Paris/2"]  # "2" was coerced to the integer the schema asks for
    first = llm.requests[0]
    assert "tools" not in first  # no native function calling
    assert "get_weather" in first["messages"][0]["content"]
    follow_up = llm.messages(1)
    assert follow_up[-2] == {"role": "assistant", "content": CALLS[protocol]}  # history keeps the markup
    assert follow_up[-1]["role"] == "user"
    assert RESULT_MARK[protocol] in follow_up[-1]["content"]
    assert "Paris: sunny, 25 C" in follow_up[-1]["content"]
    llm.assert_all_consumed()


async def test_a_malformed_call_is_reported_back_not_run(llm: ScriptedLLMServer) -> None:
    weather_calls.clear()
    broken = (
        "Checking. <<<[TOOL_REQUEST]>>>\ntool_name:「始」get_weather「末」\ncity:「始」Paris\n<<<[END_TOOL_REQUEST]>>>"
    )
    llm.expect(Reply.text(broken), Reply.text("Sorry, let me try again later."))
    config = VixioConfig.model_validate(
        {
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "t",
                "tool_protocol": "vcp",
            },
            "tools": {"builtin": []},
        }
    )
    voice = VoiceStack(config)
    voice.local_tools.append(func_to_tool_definition(get_weather))
    pipeline = voice.build_pipeline("s2")
    async with pipeline:
        await pipeline.push(TextChunk(text="Weather?", role="user"))
        assert await spoken_reply(pipeline) == ["Checking.", "Sorry, let me try again later."]
    assert weather_calls == []
    report = llm.messages(1)[-1]["content"]
    assert "error" in report.lower() and "city" in report
    llm.assert_all_consumed()


def _text_stack(llm: ScriptedLLMServer, protocol: str, **agent: object) -> VoiceStack:
    config = VixioConfig.model_validate(
        {
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "t",
                "tool_protocol": protocol,
                **agent,
            },
            "tools": {"builtin": [], "max_iterations": 2},
        }
    )
    voice = VoiceStack(config)
    voice.local_tools.append(func_to_tool_definition(get_weather))
    return voice


@pytest.mark.parametrize("protocol", ["vcp", "xml"])
async def test_max_iterations_bounds_the_tool_rounds_of_one_turn(llm: ScriptedLLMServer, protocol: str) -> None:
    weather_calls.clear()
    llm.expect(Reply.text(CALLS[protocol]), Reply.text(CALLS[protocol]), Reply.text(CALLS[protocol]))
    async with _text_stack(llm, protocol).build_pipeline("s1") as pipeline:
        await pipeline.push(TextChunk(text="Weather in Paris, again and again?", role="user"))
        assert await spoken_reply(pipeline) == ["Let me check.", "Let me check.", "Let me check."]
    assert weather_calls == ["Paris/2", "Paris/2"]  # the third round's call is not run
    assert len(llm.requests) == 3  # and its (absent) result is not sent back
    llm.assert_all_consumed()


async def test_vcp_definitions_and_results_carry_command_parameters_example_and_duration(
    llm: ScriptedLLMServer,
) -> None:
    llm.expect(Reply.text(CALLS["vcp"]), Reply.text("Sunny."))
    async with _text_stack(llm, "vcp").build_pipeline("s1") as pipeline:
        await pipeline.push(TextChunk(text="Weather?", role="user"))
        await spoken_reply(pipeline)
    prompt = llm.requests[0]["messages"][0]["content"]
    assert "command:「始」get_weather「末」" in prompt
    assert (
        'parameters:「始」[{"name":"city","type":"string","required":true},'
        '{"name":"days","type":"integer","required":false,"default":1}]「末」'
    ) in prompt
    assert "example:「始ESCAPE」tool_name:「始」get_weather「末」\ncity:「始」...「末」「末ESCAPE」" in prompt
    result = llm.messages(1)[-1]["content"]
    assert "duration_ms:「始」" in result and "Paris: sunny, 25 C" in result


async def test_xml_results_in_seed_003_event_form(llm: ScriptedLLMServer) -> None:
    import json

    llm.expect(Reply.text(CALLS["xml"]), Reply.text("Sunny."))
    async with _text_stack(llm, "xml", xml_results="event").build_pipeline("s1") as pipeline:
        await pipeline.push(TextChunk(text="Weather?", role="user"))
        await spoken_reply(pipeline)
    prompt = llm.requests[0]["messages"][0]["content"]
    assert "If no function is needed, answer the user directly" in prompt
    assert "tool_result event" in prompt
    event = json.loads(llm.messages(1)[-1]["content"])
    assert event["type"] == "tool_result" and "T" in event["timestamp"]
    (entry,) = event["data"]["results"]
    assert entry["tool_name"] == "get_weather" and entry["success"] is True
    assert entry["result"] == "Paris: sunny, 25 C" and isinstance(entry["duration_ms"], int)
