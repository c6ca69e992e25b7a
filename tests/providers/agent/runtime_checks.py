"""Checks every local runtime of the agent (agent.runtime: onnx, mistralrs) must pass, run by
their test modules: a device answered through a real server with llama-cpp-python hidden, a
barge-in ending the generation, a forced tool call. Not a test module itself."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.voice.test_agent_model import ask, loopback, ws_url
from vixio.app.server import VixioServer
from vixio.providers.agent.base import AgentTextDelta
from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider
from vixio.providers.agent.no_tools_guard import RULES
from vixio.testing.device import SimulatedDevice


async def talks_without_llama_cpp(monkeypatch: pytest.MonkeyPatch, runtime: str) -> None:
    """A simulated device asks the shipped SmolLM2 on `runtime` through a real server, llama-cpp-python hidden."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # any import of llama-cpp-python now fails
    # Limits for a loaded 2-core machine: the point here is what is said, not how fast.
    server = VixioServer(
        loopback(
            {
                "provider": "local-llama",
                "runtime": runtime,
                "max_tokens": 32,
                "temperature": 0.0,
                "first_token_timeout": 60,
                "token_gap_timeout": 60,
                "silence_timeout": 60,
                "timeout": 120,
            }
        )
    )
    await server.start()
    try:
        async with SimulatedDevice(ws_url=ws_url(server), listening_mode="manual") as device:
            await device.connect()
            # The instructions carry the clock, so a 135M model's wording moves from minute to minute
            # ("Paris", or once "Le Grand Jardin … is the capital of France"): the reply must be the
            # model's own words about the question, spoken; the quality is bench/bench_runtimes.py's.
            answer = await ask(device, "What is the capital of France?")
            assert "France" in answer or "Paris" in answer, answer
            assert await ask(device, "Turn the volume up a bit.") == RULES["en"].cannot_act
    finally:
        await server.stop()


async def barge_in_ends_the_generation(provider: type[LocalLlamaAgentProvider]) -> None:
    """A cancel ends the generation, and the next turn's first token does not wait for it."""
    agent = provider(max_tokens=256, temperature=0.7)
    await agent.initialize()
    stream = agent.chat("Tell me a long story about a dragon and a knight.")
    first = await anext(stream)
    await agent.cancel()
    rest = [e async for e in stream]
    assert isinstance(first, AgentTextDelta) and len(rest) < 5

    # Had the story gone on (256 tokens, many seconds on a loaded machine), the next turn's first
    # token would wait for it in the one inference thread.
    agent.clear_history()
    started = time.perf_counter()
    stream = agent.chat("Say hello.")
    assert isinstance(await anext(stream), AgentTextDelta)
    assert time.perf_counter() - started < 8.0
    await stream.aclose()


async def forced_call_runs_the_tool(provider: type[LocalLlamaAgentProvider], *, exact: bool) -> None:
    """`tool_choice` forces a call of set_volume; `exact`: the argument is 30 (schema-walked), else an int."""
    from vixio.core.tools.executor import ToolExecutor
    from vixio.core.tools.local import func_to_tool_definition
    from vixio.core.tools.policy import ToolPolicy
    from vixio.core.tools.toolset import ToolSet
    from vixio.providers.agent.base import AgentToolCall, AgentToolResult
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
    agent = provider(tool_choice="set_volume", temperature=0.0, max_tokens=48)
    await agent.initialize(tools=tools, system_prompt="You are a voice assistant.")
    events = [event async for event in agent.chat("Set the volume to 30.")]

    (call,) = [e for e in events if isinstance(e, AgentToolCall)]
    arguments = json.loads(call.arguments)
    if exact:
        assert call.name == "set_volume" and arguments == {"volume": 30}  # under the schema
    else:
        assert call.name == "set_volume" and isinstance(arguments["volume"], int)  # under the schema
    (result,) = [e for e in events if isinstance(e, AgentToolResult)]
    assert volumes and result.output == f"volume is {volumes[0]}"  # the real function ran
    await executor.close()
