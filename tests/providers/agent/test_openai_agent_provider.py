"""OpenAIAgentProvider end to end: litellm -> real HTTP/SSE -> ScriptedLLMServer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agents import function_tool

from vixio.providers.agent.base import (
    INTERRUPTED_MARK,
    AgentError,
    AgentEvent,
    AgentTextDelta,
    AgentTextEnd,
    AgentToolCall,
    AgentToolResult,
)
from vixio.providers.agent.openai_agents.history import is_user_message, message_text
from vixio.testing.llm_server import Reply, ScriptedLLMServer, split_deltas

pytestmark = pytest.mark.integration

Factory = Callable[..., Any]


async def collect(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [event async for event in events]


def text_of(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, AgentTextDelta))


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool"]


weather_calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    weather_calls.append(city)
    return f"{city}: sunny, 25 C"


@function_tool
def set_volume(volume: int) -> str:
    """Set the speaker volume (0-100)."""
    return f"volume set to {volume}"


async def test_text_streams_as_ordered_deltas(server: ScriptedLLMServer, make_provider: Factory) -> None:
    answer = "Hello there, I can help you with the weather and your music today."
    server.expect(Reply.text(answer))
    agent = make_provider()
    await agent.initialize(system_prompt="You are a voice assistant.")

    events = await collect(agent.chat("hi"))

    assert isinstance(events[-1], AgentTextEnd)  # the model call's text is complete
    events = events[:-1]
    assert [type(e) for e in events] == [AgentTextDelta] * len(split_deltas(answer))
    assert [e.text for e in events] == list(split_deltas(answer))
    assert len(events) > 5
    sent = server.messages(0)
    assert sent[0] == {"role": "system", "content": "You are a voice assistant."}
    assert sent[-1] == {"role": "user", "content": "hi"}
    assert server.requests[0]["stream"] is True
    assert [message_text(m) for m in agent.history] == ["hi", answer]
    server.assert_all_consumed()


async def test_tool_call_runs_function_tool_and_model_sees_output(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    weather_calls.clear()
    server.expect(
        Reply.tool_call("get_weather", {"city": "Paris"}, call_id="call_w"),
        Reply.text("It is sunny in Paris."),
    )
    agent = make_provider()
    await agent.initialize(tools=[get_weather, set_volume])

    events = await collect(agent.chat("What's the weather in Paris?"))

    assert events[0] == AgentTextEnd()  # the first model call ended (with a tool call, no text)
    assert events[1] == AgentToolCall("call_w", "get_weather", json.dumps({"city": "Paris"}))
    assert events[2] == AgentToolResult("call_w", "get_weather", "Paris: sunny, 25 C")
    assert text_of(events[3:]) == "It is sunny in Paris."
    assert events[-1] == AgentTextEnd()
    assert weather_calls == ["Paris"]
    assert server.tool_names(0) == ["get_weather", "set_volume"]
    second = server.messages(1)
    assert second[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert tool_messages(second) == [{"role": "tool", "tool_call_id": "call_w", "content": "Paris: sunny, 25 C"}]
    kinds = [item.get("type", "message") for item in agent.history]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    server.assert_all_consumed()


async def test_update_tools_keeps_history_and_next_request_lists_new_tools(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.text("Hi!"), Reply.text("Volume is now 30."))
    agent = make_provider()
    await agent.initialize(tools=[get_weather])
    await collect(agent.chat("hello"))

    await agent.update_tools([set_volume])
    await collect(agent.chat("turn it down"))

    assert server.tool_names(0) == ["get_weather"]
    assert server.tool_names(1) == ["set_volume"]  # replaced, not appended
    assert [m["content"] for m in server.messages(1)] == ["hello", "Hi!", "turn it down"]
    server.assert_all_consumed()


async def test_update_tools_during_a_turn_applies_to_its_next_model_call(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    agent = make_provider()

    @function_tool
    async def wait_for_device() -> str:
        """Wait until the device is ready."""
        await agent.update_tools([wait_for_device, set_volume])  # device tools arrive mid-turn
        return "ready"

    server.expect(Reply.tool_call("wait_for_device"), Reply.text("Ready."))
    await agent.initialize(tools=[wait_for_device])
    await collect(agent.chat("get ready"))

    assert server.tool_names(0) == ["wait_for_device"]
    assert server.tool_names(1) == ["wait_for_device", "set_volume"]
    server.assert_all_consumed()


async def test_a_turn_that_spent_its_tool_rounds_leaves_the_next_turn_its_tools(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    # Turns reuse the last turn's agent clone: the `tools = []` of a spent turn must not stay.
    server.expect(
        Reply.tool_call("get_weather", {"city": "Paris"}),
        Reply.text("Sunny."),
        Reply.text("Hello again."),
        Reply.text("Louder."),
    )
    agent = make_provider(max_tool_iterations=1)
    await agent.initialize(tools=[get_weather])
    await collect(agent.chat("weather in Paris?"))
    await collect(agent.chat("hi"))
    await agent.update_tools([set_volume])
    await collect(agent.chat("louder"))

    assert server.tool_names(0) == ["get_weather"]
    assert server.tool_names(1) == []  # the spent turn's second model call
    assert server.tool_names(2) == ["get_weather"]
    assert server.tool_names(3) == ["set_volume"]
    server.assert_all_consumed()


async def test_initialize_again_is_not_answered_by_the_old_agent(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.text("One."), Reply.text("Two."))
    agent = make_provider()
    await agent.initialize(system_prompt="You are Alice.")
    await collect(agent.chat("hello"))
    await agent.initialize(system_prompt="You are Bob.")
    await collect(agent.chat("hello again"))

    assert server.messages(0)[0] == {"role": "system", "content": "You are Alice."}
    assert server.messages(1)[0] == {"role": "system", "content": "You are Bob."}
    server.assert_all_consumed()


async def test_cancel_during_slow_stream_stops_fast_and_keeps_history_consistent(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.text("one two three four five six seven eight nine ten", delta_delay=0.3))
    agent = make_provider()
    await agent.initialize()
    seen: list[str] = []
    stream = agent.chat("count to ten")
    async for event in stream:
        assert isinstance(event, AgentTextDelta)
        seen.append(event.text)
        if len(seen) == 2:
            started = time.perf_counter()
            await agent.cancel()
    elapsed = time.perf_counter() - started

    assert elapsed < 0.5
    assert seen == ["one ", "two "]
    assert agent.history == [
        {"role": "user", "content": "count to ten"},
        {"role": "assistant", "content": f"one two… {INTERRUPTED_MARK}"},
    ]
    for _ in range(40):  # the server notices at its next write, one delta_delay later
        if server.aborted_streams:
            break
        await asyncio.sleep(0.05)
    assert server.aborted_streams == 1  # the HTTP stream was really closed

    server.expect(Reply.text("Sure."))
    await collect(agent.chat("never mind"))
    assert [m["role"] for m in server.messages(1)] == ["user", "assistant", "user"]
    server.assert_all_consumed()


async def test_closing_the_stream_or_cancelling_its_task_interrupts_the_turn(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.text("alpha beta gamma delta", delta_delay=0.2), Reply.hang())
    agent = make_provider()
    await agent.initialize()

    stream = agent.chat("first")
    first = await anext(stream)
    await stream.aclose()  # what a cancelled station does
    assert first == AgentTextDelta("alpha ")
    assert agent.history[-1] == {"role": "assistant", "content": f"alpha… {INTERRUPTED_MARK}"}

    task = asyncio.create_task(collect(agent.chat("second")))
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - started < 0.5
    assert [m["content"] for m in agent.history] == [
        "first",
        f"alpha… {INTERRUPTED_MARK}",
        "second",
        INTERRUPTED_MARK,
    ]


async def test_record_interrupted_reply_keeps_heard_text_and_tool_results(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(
        Reply.tool_call("set_volume", {"volume": 30}, call_id="call_v"),
        Reply.text("Done. The volume is now thirty percent, which is quieter."),
        Reply.text("OK."),
    )
    agent = make_provider()
    await agent.initialize(tools=[set_volume])
    await collect(agent.chat("quieter please"))

    agent.record_interrupted_reply("Done. The volume is now")

    history = agent.history
    assert history[-1] == {"role": "assistant", "content": f"Done. The volume is now… {INTERRUPTED_MARK}"}
    assert [i.get("type", "message") for i in history[1:3]] == ["function_call", "function_call_output"]
    await collect(agent.chat("thanks"))
    sent = server.messages(2)
    assert sent[-2] == {"role": "assistant", "content": f"Done. The volume is now… {INTERRUPTED_MARK}"}
    assert tool_messages(sent)[0]["content"] == "volume set to 30"
    server.assert_all_consumed()


async def test_http_error_becomes_agent_error_and_leaves_history(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.text("Hi."), Reply.error(500, "model exploded"), Reply.text("Back again."))
    agent = make_provider()
    await agent.initialize()
    await collect(agent.chat("hello"))
    before = agent.history

    with pytest.raises(AgentError, match="HTTP 500") as caught:
        await collect(agent.chat("are you there?"))

    assert "model exploded" in str(caught.value)
    assert len(str(caught.value)) < 300
    assert agent.history == before
    assert text_of(await collect(agent.chat("hello again"))) == "Back again."
    server.assert_all_consumed()  # exactly one request per reply: no hidden retries


async def test_silent_model_times_out_as_agent_error(server: ScriptedLLMServer, make_provider: Factory) -> None:
    server.expect(Reply.hang())
    agent = make_provider(timeout=0.3)
    await agent.initialize()
    started = time.perf_counter()
    with pytest.raises(AgentError, match="did not answer within 0.3 s"):
        await collect(agent.chat("hello?"))
    assert time.perf_counter() - started < 2.0
    assert agent.history == []


async def test_endless_tool_loop_is_stopped_by_max_turns(server: ScriptedLLMServer, make_provider: Factory) -> None:
    server.expect(Reply.tool_call("set_volume", {"volume": 1}), Reply.tool_call("set_volume", {"volume": 2}))
    agent = make_provider(max_turns=2)
    await agent.initialize(tools=[set_volume])
    with pytest.raises(AgentError, match="2 model calls without a final answer"):
        await collect(agent.chat("loop"))
    server.assert_all_consumed()


async def test_history_is_trimmed_by_whole_turns(server: ScriptedLLMServer, make_provider: Factory) -> None:
    server.expect(
        Reply.text("A1"),
        Reply.tool_call("set_volume", {"volume": 5}, call_id="c2"),
        Reply.text("A2"),
        Reply.text("A3"),
    )
    agent = make_provider(max_history_messages=5)
    await agent.initialize(tools=[set_volume])
    for question in ("Q1", "Q2", "Q3"):
        await collect(agent.chat(question))

    history = agent.history
    assert len(history) <= 5
    assert is_user_message(history[0]) and history[0]["content"] == "Q3"  # Q2's turn alone is 4 items
    assert [message_text(i) for i in history] == ["Q3", "A3"]
    agent.clear_history()
    assert agent.history == []


async def test_chat_before_initialize_is_an_agent_error(make_provider: Factory) -> None:
    with pytest.raises(AgentError, match="initialize"):
        await collect(make_provider().chat("hi"))


async def test_unreachable_server_is_an_agent_error() -> None:
    from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

    gone = await ScriptedLLMServer().start()
    await gone.stop()  # nothing listens on its port any more
    agent = OpenAIAgentProvider("openai/test-model", api_base=gone.base_url, api_key="test")
    await agent.initialize()
    with pytest.raises(AgentError, match="could not reach the language model at http://127.0.0.1"):
        await collect(agent.chat("hello"))


@function_tool
async def slow_lookup(topic: str) -> str:
    """Look something up (takes a while)."""
    await asyncio.sleep(1.5)
    return f"{topic}: found"


async def test_the_model_deadline_counts_the_models_time_not_the_tools(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.tool_call("slow_lookup", {"topic": "tides"}, call_id="c1"), Reply.text("High tide at noon."))
    agent = make_provider(timeout=1.0)
    await agent.initialize(tools=[slow_lookup])
    events = await collect(agent.chat("when is high tide?"))
    assert text_of(events) == "High tide at noon."  # the 1.5 s tool is not the model's 1 s


async def test_a_slowly_streamed_model_call_ends_at_the_deadline(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    server.expect(Reply.text("one two three four five six seven eight nine ten", delta_delay=0.1))
    agent = make_provider(timeout=0.45)
    await agent.initialize()
    with pytest.raises(AgentError, match="did not answer within 0.45 s"):
        await collect(agent.chat("count slowly"))


async def test_streamed_tokens_cost_no_task_each(server: ScriptedLLMServer, make_provider: Factory) -> None:
    # Every task is a loop iteration per token; on a busy loop those iterations are the latency.
    loop = asyncio.get_running_loop()
    created: list[int] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(1)
        return asyncio.Task(coro, loop=loop, **kwargs)

    agent = make_provider(timeout=30)
    await agent.initialize()
    counts = []
    for words in (4, 60):
        server.expect(Reply.text(" ".join(["word"] * words) + "."))
        loop.set_task_factory(counting)
        try:
            await collect(agent.chat("talk"))
        finally:
            loop.set_task_factory(factory)
        counts.append(len(created))
        created.clear()
    assert counts[1] <= counts[0] + 2, counts


async def test_parallel_tool_calls_still_run_at_the_same_time(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    """The SDK's gathers run eagerly (vixio.patches.openai_agents), yet two tool calls of one answer still run
    concurrently: each waits for the other to have started, which one at a time never could."""
    from vixio.testing.llm_server import ScriptedToolCall

    started: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}

    @function_tool
    async def meet(name: str) -> str:
        """Wait for the other caller."""
        started[name].set()
        await asyncio.wait_for(started["b" if name == "a" else "a"].wait(), 2)
        return f"{name} met"

    server.expect(
        Reply.tool_calls(
            ScriptedToolCall("meet", {"name": "a"}, "call_a"), ScriptedToolCall("meet", {"name": "b"}, "call_b")
        ),
        Reply.text("Both met."),
    )
    agent = make_provider()
    await agent.initialize(tools=[meet])
    events = await asyncio.wait_for(collect(agent.chat("meet")), 10)
    results = {e.call_id: e.output for e in events if isinstance(e, AgentToolResult)}
    assert results == {"call_a": "a met", "call_b": "b met"}
    assert text_of(events) == "Both met."
    server.assert_all_consumed()
