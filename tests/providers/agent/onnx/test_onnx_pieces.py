"""The pieces of the ONNX runtime that need no model: GGUF blocks repacked for MatMulNBits (checked
against gguf's own dequantization, and run in onnxruntime), ChatML rendering, the BPE tokenizer
rebuilt from a vocabulary and merges, and streamed detokenization."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.unit

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")


@dataclass
class FakeTensor:
    """What `linear_from_gguf` reads of a `gguf.ReaderTensor`."""

    name: str
    shape: tuple[int, int]
    data: np.ndarray
    tensor_type: Any


def quantized(kind: str, n: int = 24, k: int = 96) -> tuple[FakeTensor, np.ndarray]:
    from gguf.quants import dequantize, quantize

    w = np.random.default_rng(7).normal(0, 0.05, (n, k)).astype(np.float32)
    w[0, :32] = 0.0  # a block of zeros: scale 0
    qtype = gguf.GGMLQuantizationType[kind]
    raw = quantize(w, qtype)
    return FakeTensor("w", (k, n), raw, qtype), np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(n, k)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", "F16", "Q5_0"])
def test_gguf_blocks_become_the_same_weights(kind: str) -> None:
    from vixio.providers.agent.ort.gguf_weights import linear_from_gguf

    tensor, reference = quantized(kind)
    linear = linear_from_gguf(tensor)
    exact = kind in ("Q4_0", "Q4_1", "Q8_0")  # the rest are requantized to 8 bits
    tolerance = 1e-6 if exact else np.abs(reference).max() / 100
    assert linear.bits == (4 if kind.startswith("Q4") else 8)
    assert (linear.offsets is not None) == (kind == "Q4_1")
    np.testing.assert_allclose(linear.dequantized(), reference, atol=tolerance)
    np.testing.assert_allclose(linear.rows(np.array([3, 1])), reference[[3, 1]], atol=tolerance)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_the_graph_product_matches_numpy(kind: str) -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from vixio.providers.agent.ort.gguf_weights import linear_from_gguf
    from vixio.providers.agent.ort.graph import _Builder

    tensor, reference = quantized(kind)
    n, k = reference.shape
    for level, tolerance in ((0, 1e-4), (4, 2e-2)):  # level 4 quantizes the input to int8 per block
        builder = _Builder(level)
        builder.constant("axis_last", np.array([-1], dtype=np.int64))
        builder.linear("x", linear_from_gguf(tensor), "y")
        graph = helper.make_graph(
            builder.nodes,
            "product",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", n])],
            builder.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
        )
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).normal(0, 1, (1, 5, k)).astype(np.float32)
        (y,) = session.run(None, {"x": x})
        expected = x @ reference.T
        assert np.abs(y - expected).max() <= tolerance * np.abs(expected).max(), level


def test_rotary_caches_are_the_rotation_angles() -> None:
    from vixio.providers.agent.ort.graph import rotary_caches

    cos, sin = rotary_caches(8, 10000.0, 3)
    assert cos.shape == sin.shape == (3, 4)
    np.testing.assert_allclose(cos[0], 1.0)
    np.testing.assert_allclose(sin[2, 1], np.sin(2 * 10000.0 ** (-2 / 8)), rtol=1e-6)


SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
)


def test_chatml_renders_as_the_gguf_template_does() -> None:
    from vixio.providers.agent.ort.text import render_chatml

    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chatml(turns, SMOL_TEMPLATE) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    # Without a system turn the template adds its own, as llama-cpp's rendering of it does.
    assert render_chatml(turns[1:], SMOL_TEMPLATE).startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi"
    )
    with pytest.raises(ValueError, match="ChatML"):
        render_chatml(turns, "{{ bos_token }}[INST] {{ message }} [/INST]")


def tiny_tokenizer() -> Any:
    from vixio.providers.agent.ort.text import build_tokenizer

    alphabet = [chr(c) for c in range(33, 127)] + ["Ġ", "Ã", "©", "ä", "¸", "Ń"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *alphabet, "Ġt", "he", "Ġthe", "12"]
    merges = ["Ġ t", "h e", "Ġt he", "1 2"]
    return build_tokenizer(tokens, merges, [3, 3, 3, *[1] * (len(tokens) - 3)], "smollm")


def test_the_tokenizer_merges_splits_digits_and_keeps_control_tokens_whole() -> None:
    tokenizer = tiny_tokenizer()
    vocab = tokenizer.get_vocab()
    ids = tokenizer.encode("<|im_start|>the the 12", add_special_tokens=False).ids
    pieces = [tokenizer.id_to_token(i) for i in ids]
    # "12" is a merge, but "smollm" splits digits one by one first (as SmolLM2's tokenizer.json).
    assert pieces == ["<|im_start|>", "t", "he", "Ġthe", "Ġ", "1", "2"]
    assert ids[0] == vocab["<|im_start|>"] == 1
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the the 12"


def test_streamed_text_waits_for_whole_characters() -> None:
    from vixio.providers.agent.ort.text import StreamDecoder

    tokenizer = tiny_tokenizer()
    ids = tokenizer.encode("the é", add_special_tokens=False).ids  # é is two byte-level tokens
    decoder = StreamDecoder(tokenizer)
    pieces = [decoder.push(i) for i in ids]
    assert pieces[-2] == "" and pieces[-1] == "é"
    assert "".join(pieces) == decoder.text == "the é"
