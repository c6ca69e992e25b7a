"""The openai SDK request-transform fast path: the same body the SDK's own transform makes."""

from __future__ import annotations

import datetime
import importlib
import time

import pytest

from vixio.providers.agent import sdk_speedups

openai_completions = pytest.importorskip("openai.resources.chat.completions.completions")
from openai import NOT_GIVEN, omit  # noqa: E402
from openai.types.chat import completion_create_params  # noqa: E402

STREAMING = completion_create_params.CompletionCreateParamsStreaming


def body(history: int = 10, tools: int = 5) -> dict:
    messages: list[dict] = [{"role": "system", "content": "You are a voice assistant."}]
    for i in range(history):
        messages.append({"role": "user", "content": f"Question {i}: what is the weather like?"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "sunny"})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]})
    return {
        "messages": messages, "model": "gpt-4o-mini", "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0.7, "max_tokens": NOT_GIVEN, "top_p": omit, "tool_choice": "auto",
        "tools": [{"type": "function", "function": {"name": f"tool_{i}", "description": "d", "parameters": {
            "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}} for i in range(tools)],
    }


async def test_fast_path_equals_the_sdks_transform() -> None:
    assert sdk_speedups.install()
    fast = openai_completions.async_maybe_transform
    original = fast.original
    for case in (body(0, 0), body(3, 1), body(10, 20)):
        assert await fast(case, STREAMING) == await original(case, STREAMING)


async def test_anything_not_plain_json_goes_through_the_sdk() -> None:
    sdk_speedups.install()
    fast = openai_completions.async_maybe_transform
    odd = body(1, 0)
    odd["messages"] = tuple(odd["messages"])  # an iterable the SDK turns into a list
    odd["metadata"] = {"when": datetime.date(2026, 1, 1)}
    result = await fast(odd, STREAMING)
    assert result == await fast.original(odd, STREAMING)
    assert isinstance(result["messages"], list)


async def test_fast_path_is_much_cheaper() -> None:
    sdk_speedups.install()
    fast = openai_completions.async_maybe_transform
    case = body(10, 10)
    started = time.perf_counter()
    for _ in range(10):
        await fast.original(case, STREAMING)
    slow = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(10):
        await fast(case, STREAMING)
    quick = time.perf_counter() - started
    assert quick * 5 < slow, (quick, slow)


def test_a_params_type_with_an_alias_is_not_skipped() -> None:
    from typing import Annotated, TypedDict

    transform = importlib.import_module("openai._utils._transform")

    class Inner(TypedDict, total=False):
        card_id: Annotated[str, transform.PropertyInfo(alias="cardID")]

    class Outer(TypedDict, total=False):
        items: list[Inner]

    assert not sdk_speedups._is_identity(Outer, transform.PropertyInfo)
    assert sdk_speedups._is_identity(STREAMING, transform.PropertyInfo)
