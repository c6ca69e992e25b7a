"""A GGUF chat model on ONNX Runtime behind the small part of llama-cpp-python's `Llama`
interface the local agent model uses, so vixio.providers.agent.llama.provider runs on it
unchanged: `create_chat_completion` (whole or streamed, chunks shaped as llama-cpp's OpenAI
dicts) and `metadata["tokenizer.chat_template"]`. The graph is built from the GGUF at first load
and cached (vixio.providers.agent.ort.graph).

As llama.cpp does:
- the keys and values of the last prompt and reply are kept, and a new prompt only evaluates
  what follows the longest common token prefix (the instructions and the history do not change
  from turn to turn; the clock is moved after them, see llama/chatml.py);
- sampling: repeat penalty over the last 64 tokens of the context, then top-k 40, top-p, min-p
  0.05, temperature (0 = greedy); generation ends at the end-of-turn tokens or `max_tokens`;
- a prompt that does not fit in `n_ctx` with its reply is an error, not silently cut.

Not thread-safe: one engine per model file per process, driven from the one inference thread
(llama/weights.py `INFERENCE`). Memory: the weights (mapped, shared by workers) and at most
`n_ctx` tokens of keys and values (SmolLM2-135M: 46 KB a token, 94 MB at 2,048).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from vixio.config.extras import install_hint
from vixio.providers.agent.ort.gguf_weights import Hyper, QuantizedLinear
from vixio.providers.agent.ort.graph import GRAPH_NAME, cached_model
from vixio.providers.agent.ort.text import StreamDecoder, render_chatml

EXTRA_HINT = install_hint("local-onnx")
DEFAULT_THREADS = 1
"""Two threads on two cores shared with ASR and TTS cost more CPU per token than one (as llama.cpp)."""
PROMPT_CHUNK = 256
"""Prompt tokens per run: bounds the activations a long history needs at once."""
PENALTY_WINDOW = 64
TOP_K = 40
MIN_P = 0.05

_ENGINES: dict[tuple[str, int], OnnxChat] = {}
_ENGINES_LOCK = threading.Lock()


class ContextFull(ValueError):
    """The prompt and its reply do not fit in the context."""


class OnnxChat:
    """One GGUF chat model on ONNX Runtime, answering like llama-cpp-python's `Llama`."""

    def __init__(self, path: Path, n_ctx: int = 2048, threads: int | None = None) -> None:
        try:  # gguf and onnx build the graph: checked at every load, so that a missing one shows on
            # the first run of every machine, not only on one whose model cache is empty
            import gguf  # noqa: F401
            import onnx  # noqa: F401
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            missing = exc.name or "onnxruntime, onnx, gguf and tokenizers"
            raise ImportError(f"the local LLM on ONNX Runtime needs the {missing} package: {EXTRA_HINT}") from exc
        started = time.perf_counter()
        directory = cached_model(path)
        meta = json.loads((directory / "meta.json").read_text())
        self.hyper = Hyper(**meta["hyper"])
        self.n_ctx = min(n_ctx, self.hyper.context)
        self.stop_tokens = frozenset(meta["stop_tokens"])
        self.bos = meta["bos"] if meta["add_bos"] else None
        self.metadata = {"tokenizer.chat_template": meta["chat_template"]}
        self.name = path.name
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        offsets = directory / "embeddings.offsets.npy"
        self._embeddings = QuantizedLinear(
            n=self.hyper.vocab,
            k=self.hyper.hidden,
            bits=meta["embedding_bits"],
            packed=np.load(directory / "embeddings.q.npy", mmap_mode="r"),
            scales=np.load(directory / "embeddings.scales.npy", mmap_mode="r"),
            offsets=np.load(offsets, mmap_mode="r") if offsets.exists() else None,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or DEFAULT_THREADS
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # cores are shared
        # Without the arena, what a long prompt needed is returned after it, not held for good
        # (the resident memory after the household set: 226 MB against 244 MB, at the same speed).
        options.enable_cpu_mem_arena = False
        self._session = ort.InferenceSession(str(directory / GRAPH_NAME), options, providers=["CPUExecutionProvider"])
        empty = np.zeros((1, self.hyper.kv_heads, 0, self.hyper.head_dim), dtype=np.float32)
        self._empty = [empty] * (2 * self.hyper.layers)
        self._past = self._empty
        self.tokens: list[int] = []
        """The tokens whose keys and values are cached, in order."""
        self.evaluated = 0
        """Prompt tokens the last `begin` evaluated (the rest came from the cache)."""
        self.usage = (0, 0)
        """Prompt and completion tokens of the last generation."""
        self._random = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
        logger.info("loaded {} on ONNX Runtime in {:.2f} s", path.name, time.perf_counter() - started)

    # -- evaluation ---------------------------------------------------------------------------

    def _run(self, ids: list[int]) -> np.ndarray:
        done = len(self.tokens)
        feed: dict[str, Any] = {
            "embeds": self._embeddings.rows(np.asarray(ids))[None],
            "seqlens_k": np.array([done + len(ids) - 1], dtype=np.int32),
            "total_length": np.array(done + len(ids), dtype=np.int32),
        }
        for layer in range(self.hyper.layers):
            feed[f"past_key.{layer}"] = self._past[2 * layer]
            feed[f"past_value.{layer}"] = self._past[2 * layer + 1]
        logits, *self._past = self._session.run(None, feed)
        self.tokens.extend(ids)
        return np.asarray(logits[0], dtype=np.float32)

    def append(self, ids: list[int]) -> np.ndarray:
        """Evaluate `ids` after the cached tokens; the logits of the next token."""
        if len(self.tokens) + len(ids) > self.n_ctx:
            raise ContextFull(f"{len(self.tokens) + len(ids)} tokens exceed the context of {self.n_ctx}")
        logits = np.empty(0, dtype=np.float32)
        for start in range(0, len(ids), PROMPT_CHUNK):
            logits = self._run(ids[start : start + PROMPT_CHUNK])
        return logits

    def begin(self, prompt: list[int]) -> np.ndarray:
        """Evaluate `prompt`, reusing the cached keys and values of its longest common prefix."""
        if not prompt:
            raise ValueError("an empty prompt")
        common = 0
        for cached, wanted in zip(self.tokens, prompt, strict=False):
            if cached != wanted:
                break
            common += 1
        common = min(common, len(prompt) - 1)  # the last token is evaluated again for its logits
        if common < len(self.tokens):
            self.tokens = self.tokens[:common]
            self._past = [np.ascontiguousarray(a[:, :, :common]) for a in self._past] if common else self._empty
        self.evaluated = len(prompt) - common
        return self.append(prompt[common:])

    def reset(self) -> None:
        """Forget the cached keys and values (the next prompt is evaluated whole)."""
        self.tokens, self._past = [], self._empty

    def encode(self, text: str) -> list[int]:
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return [self.bos, *ids] if self.bos is not None else ids

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode(render_chatml(messages, self.metadata["tokenizer.chat_template"]))

    # -- sampling -----------------------------------------------------------------------------

    def choose(self, logits: np.ndarray, options: dict[str, Any]) -> int:
        """The next token (see the module docstring)."""
        logits = logits.copy()
        penalty = float(options.get("repeat_penalty") or 1.0)
        if penalty != 1.0 and self.tokens:
            recent = np.unique(np.asarray(self.tokens[-PENALTY_WINDOW:]))
            values = logits[recent]
            logits[recent] = np.where(values > 0, values / penalty, values * penalty)
        temperature = options.get("temperature")
        temperature = 0.2 if temperature is None else float(temperature)  # llama-cpp-python's default
        if temperature <= 0:
            return int(np.argmax(logits))
        top = np.argpartition(logits, -TOP_K)[-TOP_K:]
        top = top[np.argsort(logits[top])[::-1]]
        probs = np.exp(logits[top] - logits[top[0]])
        probs /= probs.sum()
        keep = int(np.searchsorted(np.cumsum(probs), float(options.get("top_p") or 0.95))) + 1
        keep = max(1, min(keep, int((probs >= MIN_P * probs[0]).sum())))
        scaled = np.exp((logits[top[:keep]] - logits[top[0]]) / temperature)
        return int(self._random.choice(top[:keep], p=scaled / scaled.sum()))

    # -- the Llama interface ------------------------------------------------------------------

    def generate(self, messages: list[dict[str, str]], options: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
        """(text piece, None) as the reply streams, then ("", finish reason)."""
        prompt = self.prompt_tokens(messages)
        max_tokens = int(options.get("max_tokens") or 128)
        if len(prompt) >= self.n_ctx:
            raise ContextFull(f"the prompt's {len(prompt)} tokens exceed the context of {self.n_ctx}")
        logits = self.begin(prompt)
        decoder = StreamDecoder(self.tokenizer)
        self.usage = (len(prompt), 0)
        for produced in range(1, max_tokens + 1):
            token = self.choose(logits, options)
            if token in self.stop_tokens:
                yield "", "stop"
                return
            self.usage = (len(prompt), produced)
            if piece := decoder.push(token):
                yield piece, None
            if len(self.tokens) >= self.n_ctx:
                break
            if produced < max_tokens:  # the last token's logits are not needed
                logits = self.append([token])
        yield "", "length"

    def create_chat_completion(
        self, messages: list[dict[str, str]], stream: bool = False, **options: Any
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """As `Llama.create_chat_completion`. `tools` are not given to the model: the agent model
        offers them in the prompt and reads calls from the text (see llama/tools.py)."""
        options.pop("tools", None)
        if stream:
            return self._stream(messages, options)
        pieces, reason = [], "length"
        for piece, finish in self.generate(messages, options):
            pieces.append(piece)
            reason = finish or reason
        prompt, completion = self.usage
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [
                {"index": 0, "finish_reason": reason, "message": {"role": "assistant", "content": "".join(pieces)}}
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }

    def _stream(self, messages: list[dict[str, str]], options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        # Closing this generator (the consumer stopped) ends the generation at the next token.
        ident, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
        for piece, finish in self.generate(messages, options):
            delta: dict[str, Any] = {"role": "assistant", "content": piece} if piece else {}
            yield {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.name,
                "choices": [{"index": 0, "finish_reason": finish, "delta": delta}],
            }


def load_onnx(path: Path, n_ctx: int, n_threads: int | None = None) -> OnnxChat:
    """The process-wide engine for this file and context (loaded, and built once, on first use)."""
    with _ENGINES_LOCK:
        key = (str(path), n_ctx)
        if key not in _ENGINES:
            _ENGINES[key] = OnnxChat(path, n_ctx, n_threads)
        return _ENGINES[key]
