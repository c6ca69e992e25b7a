"""Can the configured model call tools? Decided once, before any model loads.

- A GGUF file (local-llama): its chat template (`tokenizer.chat_template` in the file's
  metadata) renders a `tools` list only when the model was trained to call them (Qwen 2.5/3,
  Llama 3.x, SmolLM2-1.7B, Hermes). SmolLM2-135M's template has no tools.
- A litellm model: litellm's model list says `supports_function_calling: false` for some
  models; a model it does not list (a custom `ollama/...` name, an `openai/...` model behind
  your own server) is given the benefit of the doubt.

The GGUF header is read here with a small parser (below) rather than by loading the model, so the
supervisor can warn without importing llama.cpp; the test suite checks it against llama.cpp's
own reading of the shipped model.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path

TOOL_MODELS_HINT = (
    "set agent.model_path to a GGUF whose chat template takes tools (Qwen 2.5/3, Llama 3.x, "
    "SmolLM2-1.7B, Hermes), or use agent.provider litellm with a model that calls functions "
    "(openai/gpt-4o-mini, deepseek/deepseek-chat, ollama_chat/qwen2.5), or a text tool protocol "
    "(agent.tool_protocol: vcp or xml)"
)


@dataclass(frozen=True, slots=True)
class ToolSupport:
    """Whether the model is offered tools, and why."""

    offered: bool
    model: str
    """The model as the config names it (for messages)."""
    reason: str = ""
    """Why not, when not offered."""


# --- GGUF metadata ------------------------------------------------------------------------------

_GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """The file is not a GGUF file this reader understands (version 2 or 3)."""


def gguf_metadata_string(path: str | Path, key: str) -> str | None:
    """One string value of a GGUF file's metadata (None when the key is absent).

    Reads only the header (the metadata comes before the tensors); arrays such as the
    tokenizer's 50,000 tokens are skipped without being decoded.
    """
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != _GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file")
        version, _tensors, count = struct.unpack_from("<IQQ", data, 4)
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version} is not supported (2 or 3 are)")
        offset = 24
        for _ in range(count):
            name, offset = _read_string(data, offset)
            (kind,), offset = struct.unpack_from("<I", data, offset), offset + 4
            if name == key:
                if kind != _STRING:
                    return None
                return _read_string(data, offset)[0]
            offset = _skip_value(data, offset, kind)
    return None


def _read_string(data: mmap.mmap, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, offset)
    start = offset + 8
    if start + length > len(data):
        raise GGUFError("truncated GGUF metadata")
    return data[start : start + length].decode("utf-8", errors="replace"), start + length


def _skip_value(data: mmap.mmap, offset: int, kind: int) -> int:
    if kind in _SCALARS:
        return offset + struct.calcsize("<" + _SCALARS[kind])
    length: int  # struct.unpack_from's tuple is untyped; "<Q" reads an unsigned integer
    if kind == _STRING:
        (length,) = struct.unpack_from("<Q", data, offset)
        return offset + 8 + length
    if kind == _ARRAY:
        item_kind: int
        item_kind, length = struct.unpack_from("<IQ", data, offset)
        offset += 12
        if item_kind in _SCALARS:
            return offset + length * struct.calcsize("<" + _SCALARS[item_kind])
        for _ in range(length):
            offset = _skip_value(data, offset, item_kind)
        return offset
    raise GGUFError(f"unknown GGUF metadata type {kind}")


def template_takes_tools(template: str | None) -> bool:
    """A chat template that renders a `tools` variable (the model was trained to call tools)."""
    return bool(template) and "tools" in str(template)


@cache
def gguf_takes_tools(path: str) -> bool:
    """Whether the GGUF at `path` has a chat template that takes tools (cached per path)."""
    return template_takes_tools(gguf_metadata_string(path, "tokenizer.chat_template"))


# --- litellm's model list -----------------------------------------------------------------------

_LITELLM_MODEL_LIST = "model_prices_and_context_window_backup.json"


@cache
def _litellm_models() -> dict[str, dict[str, object]]:
    """litellm's bundled model list, read as a file: importing litellm for it would cost ~140 MB
    and ~3 s in a process (the supervisor) that never calls a model. Empty when not found."""
    spec = find_spec("litellm")
    if spec is None or not spec.origin:
        return {}
    try:
        models: dict[str, dict[str, object]] = json.loads(
            (Path(spec.origin).parent / _LITELLM_MODEL_LIST).read_text(encoding="utf-8")
        )
    except (OSError, ValueError):
        return {}
    return models


def litellm_function_calling(model: str) -> bool | None:
    """litellm's `supports_function_calling` for a model string; None when litellm does not
    list the model (or says nothing about it)."""
    models = _litellm_models()
    provider, _, bare = model.partition("/")
    entry = models.get(model)
    if entry is None and bare:
        entry = models.get(bare)
        if entry is not None and entry.get("litellm_provider") not in (provider, None):
            entry = None
    if not isinstance(entry, dict) or "supports_function_calling" not in entry:
        return None
    return bool(entry["supports_function_calling"])
