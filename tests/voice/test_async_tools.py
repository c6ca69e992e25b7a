"""An async tool finishes after its turn and the agent speaks its result unprompted (docs/tool-systems.md §6).

Real parts: the voice stack's per-session tools, the process task queue, an openai-agents agent
over litellm against the scripted OpenAI-compatible server on loopback.
"""

from __future__ import annotations

import asyncio

import pytest

from vixio.config.models import VixioConfig
from vixio.core.chunk import Chunk, StreamCompleteChunk, TextChunk
from vixio.core.pipeline import Pipeline
from vixio.core.tools.local import func_to_tool_definition
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.voice.stack import VoiceStack

pytestmark = pytest.mark.integration

release: asyncio.Event


async def build_report(topic: str) -> str:
    """Write a long report on a topic (takes a while)."""
    await release.wait()
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


async def reply_of(pipeline: Pipeline) -> tuple[str, list[Chunk]]:
    """Assistant sentences until the reply completes."""
    seen: list[Chunk] = []
    while True:
        chunk = await asyncio.wait_for(pipeline.get(), 10)
        seen.append(chunk)
        if isinstance(chunk, StreamCompleteChunk):
            text = " ".join(c.text for c in seen if isinstance(c, TextChunk) and c.role == "assistant")
            return text, seen


async def test_result_of_a_background_tool_is_spoken_after_its_turn(llm: ScriptedLLMServer) -> None:
    global release
    release = asyncio.Event()
    llm.expect(
        Reply.tool_call("build_report", {"topic": "sales"}, call_id="call_r"),
        Reply.text("I started the report, it will take a moment."),
        Reply.text("Your sales report is ready: it is 3 pages long."),
    )
    voice = stack(llm)
    tools = voice.session_tools("s1")
    assert tools is not None and "get_task_status" in [t.name for t in tools.tools]
    pipeline = voice.build_pipeline("s1", tools=tools)
    async with pipeline:
        await pipeline.push(TextChunk(text="Make me a sales report.", role="user"))
        first, _ = await reply_of(pipeline)
        assert first == "I started the report, it will take a moment."
        handle = [m for m in llm.messages(1) if m["role"] == "tool"][0]["content"]
        assert '"type":"async_task"' in handle and '"status":"pending"' in handle
        record = tools.context.task_for_call("call_r")
        assert record is not None and record.status in ("pending", "running")

        release.set()  # the tool finishes after its turn: nobody speaks to the device
        second, _ = await reply_of(pipeline)
        assert second == "Your sales report is ready: it is 3 pages long."
        note = llm.messages(2)[-1]
        assert note["role"] == "user" and "call_r" in note["content"]
        assert "the sales report is 3 pages long" in note["content"]
        assert tools.context.task_for_call("call_r").status == "completed"
    llm.assert_all_consumed()
    await voice.close()


async def test_a_session_that_ends_cancels_its_tasks(llm: ScriptedLLMServer) -> None:
    global release
    release = asyncio.Event()
    llm.expect(Reply.tool_call("build_report", {"topic": "x"}, call_id="call_x"), Reply.text("Started."))
    voice = stack(llm)
    tools = voice.session_tools("s2")
    assert tools is not None
    pipeline = voice.build_pipeline("s2", tools=tools)
    async with pipeline:
        await pipeline.push(TextChunk(text="Report on x.", role="user"))
        await reply_of(pipeline)
    record = tools.context.task_for_call("call_x")
    assert record is not None and record.status == "cancelled"
    assert voice.task_queue.count("running") == 0
    release.set()
    await voice.close()
