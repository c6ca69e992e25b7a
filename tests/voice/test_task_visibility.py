"""Seed 004: background work the model can see — listed each turn, and a result that lands
during a barge-in travels with the user's next message instead of being spoken over them.

Real parts: the voice stack's per-session tools and task queue, the pipeline, an openai-agents
agent over litellm against the scripted OpenAI-compatible server on loopback.
"""

from __future__ import annotations

import asyncio

import pytest

from vixio.config.models import VixioConfig
from vixio.core.chunk import StreamCompleteChunk, TextChunk, TextDeltaChunk
from vixio.core.pipeline import Pipeline
from vixio.core.tools.local import func_to_tool_definition
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.voice.stack import VoiceStack

pytestmark = pytest.mark.integration

gate: asyncio.Event


async def build_report(topic: str) -> str:
    """Write a long report on a topic (takes a while)."""
    await gate.wait()
    return f"the {topic} report is 3 pages long"


def stack(llm: ScriptedLLMServer) -> VoiceStack:
    config = VixioConfig.model_validate(
        {
            "agent": {"provider": "litellm", "model": "openai/test-model", "api_base": llm.base_url, "api_key": "t"},
            "tools": {"builtin": []},
        }
    )
    voice = VoiceStack(config)
    voice.local_tools.append(func_to_tool_definition(build_report, is_async=True))
    return voice


async def until_complete(pipeline: Pipeline) -> None:
    while not isinstance(await asyncio.wait_for(pipeline.get(), 15), StreamCompleteChunk):
        pass


async def test_running_tasks_are_listed_to_the_model_each_turn(llm: ScriptedLLMServer) -> None:
    global gate
    gate = asyncio.Event()
    llm.expect(
        Reply.tool_call("build_report", {"topic": "sales"}, call_id="call_r"),
        Reply.text("Started."),
        Reply.text("It is still running."),
        Reply.text("Your report is ready."),
        Reply.text("Nothing else is running."),
    )
    voice = stack(llm)
    tools = voice.session_tools("s1")
    assert tools is not None
    async with voice.build_pipeline("s1", tools=tools) as pipeline:
        await pipeline.push(TextChunk(text="Make a sales report.", role="user"))
        await until_complete(pipeline)
        await pipeline.push(TextChunk(text="How is it going?", role="user"))
        await until_complete(pipeline)
        user = llm.messages(2)[-1]["content"]
        assert user.endswith("How is it going?")
        assert "[Background tasks" in user and '"call_id":"call_r"' in user and '"tool":"build_report"' in user
        assert '"status":"running"' in user or '"status":"pending"' in user

        gate.set()  # finishes: announced in a turn of its own, then not listed again
        await until_complete(pipeline)
        assert "the sales report is 3 pages long" in llm.messages(3)[-1]["content"]
        await pipeline.push(TextChunk(text="Anything else?", role="user"))
        await until_complete(pipeline)
        assert llm.messages(4)[-1]["content"] == "Anything else?"
    llm.assert_all_consumed()
    await voice.close()


async def test_a_result_arriving_during_a_barge_in_goes_with_the_users_next_message(llm: ScriptedLLMServer) -> None:
    global gate
    gate = asyncio.Event()
    long_answer = "Here is a long story about the weather in many cities, told slowly " * 3
    llm.expect(
        Reply.tool_call("build_report", {"topic": "sales"}, call_id="call_r"),
        Reply.text("Started."),
        Reply.text(long_answer, delta_delay=0.05),  # the user barges into this one
        Reply.text("Your report is ready, and it is sunny."),
    )
    voice = stack(llm)
    tools = voice.session_tools("s2")
    assert tools is not None
    async with voice.build_pipeline("s2", tools=tools) as pipeline:
        await pipeline.push(TextChunk(text="Make a sales report.", role="user"))
        await until_complete(pipeline)
        await pipeline.push(TextChunk(text="Tell me about the weather.", role="user"))
        while not isinstance(await asyncio.wait_for(pipeline.get(), 15), TextDeltaChunk | TextChunk):
            pass  # the long answer is being spoken
        gate.set()  # the result lands while the assistant is talking...
        record = tools.context.task_for_call("call_r")
        for _ in range(500):
            if record is not None and record.finished:
                break
            await asyncio.sleep(0.01)
        assert record is not None and record.status == "completed"
        await pipeline.interrupt("the user barged in")  # ...and the user cuts in
        await asyncio.sleep(0.5)
        assert len(llm.requests) == 3  # nothing was spoken over the user: no announcement turn ran
        await pipeline.push(TextChunk(text="Stop. Is my report done?", role="user"))
        await until_complete(pipeline)
    user = llm.messages(3)[-1]
    assert user["role"] == "user"
    assert "call_r" in user["content"] and "the sales report is 3 pages long" in user["content"]
    assert user["content"].endswith("Stop. Is my report done?")
    llm.assert_all_consumed()
    await voice.close()
