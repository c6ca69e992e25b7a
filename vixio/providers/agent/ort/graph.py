"""The decoder of a Llama-architecture GGUF as an ONNX graph of onnxruntime's CPU contrib ops,
built with onnx.helper at first load and cached on disk.

One graph serves the prompt and every generated token: `embeds` (1, S, hidden) in (the token
embeddings are looked up outside, `GGUFModel.output().rows`), the logits of the LAST position
out, and each layer's keys and values in (`past_*`, (1, kv_heads, P, head_dim)) and out
(`present_*`, P + S long). Per layer: `SkipSimplifiedLayerNormalization` (RMSNorm and the
residual add in one), one `MatMulNBits` for Q, K and V together, `GroupQueryAttention` (causal,
rotary embeddings applied inside, GGUF's adjacent-pair rotation: `rotary_interleaved`), the
output projection, one `MatMulNBits` for gate and up, SiLU, the down projection.

Cached in `<cache_dir>/onnx-llm/<name>-<sha256 of the GGUF>-v<BUILDER_VERSION>/` (graph, external
weights, embeddings, tokenizer, made in a temporary directory renamed into place, so concurrent workers never see half
of one); only the first load pays the build (SmolLM2-135M: see docs/providers.md). Nothing here
touches the network.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from vixio.providers.agent.ort.gguf_weights import BLOCK, GGUFModel, QuantizedLinear, concatenated
from vixio.providers.agent.ort.text import END_OF_GENERATION
from vixio.providers.model_cache import cache_dir

BUILDER_VERSION = 1
"""Part of the cache key: bump when the graph built from the same file changes."""
GRAPH_NAME = "decoder.onnx"
ACCURACY_LEVEL = 4
"""MatMulNBits quantizes its input to int8 per block (as llama.cpp does for these formats): ~3x
faster than float inputs for one token (85 against 263 us, 576x1536, one thread)."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


class _Builder:
    def __init__(self, accuracy_level: int) -> None:
        self.accuracy_level = accuracy_level
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], domain: str = "", **attributes: Any) -> None:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0] or op, domain=domain, **attributes))

    def linear(self, x: str, weight: QuantizedLinear, name: str) -> str:
        """`x @ W.T`, exact for the GGUF formats (see gguf_weights)."""
        inputs = [x, self.constant(f"{name}.q", weight.packed), self.constant(f"{name}.scales", weight.scales)]
        product = name if weight.offsets is None else f"{name}.main"
        self.node(
            "MatMulNBits",
            inputs,
            [product],
            domain="com.microsoft",
            K=weight.k,
            N=weight.n,
            bits=weight.bits,
            block_size=BLOCK,
            accuracy_level=self.accuracy_level,
        )
        if weight.offsets is None:
            return product
        blocks = self.constant(f"{name}.blocks", np.array([0, 0, weight.k // BLOCK, BLOCK], dtype=np.int64))
        self.node("Reshape", [x, blocks], [f"{name}.blocked"])
        self.node("ReduceSum", [f"{name}.blocked", "axis_last"], [f"{name}.blocksum"], keepdims=0)
        self.node("MatMul", [f"{name}.blocksum", self.constant(f"{name}.offsets", weight.offsets)], [f"{name}.min"])
        self.node("Add", [product, f"{name}.min"], [name])
        return name


def rotary_caches(head_dim: int, base: float, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (positions, head_dim / 2) of the rotary embedding."""
    inverse = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(positions, dtype=np.float64)[:, None] * inverse[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def build_graph(model: GGUFModel, accuracy_level: int = ACCURACY_LEVEL) -> Any:
    """The decoder's ModelProto (see the module docstring); `accuracy_level` 0 keeps the inputs
    of the products in float32 (exact to the dequantized weights, ~3x slower: for checking)."""
    from onnx import TensorProto, helper

    h = model.hyper
    b = _Builder(accuracy_level)
    b.constant("axis_last", np.array([-1], dtype=np.int64))
    cos, sin = rotary_caches(h.head_dim, h.rope_base, h.context)
    b.constant("cos_cache", cos)
    b.constant("sin_cache", sin)
    b.constant("last", np.array(-1, dtype=np.int64))
    inputs = [
        helper.make_tensor_value_info("embeds", TensorProto.FLOAT, [1, "sequence", h.hidden]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
        helper.make_tensor_value_info("total_length", TensorProto.INT32, []),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, h.vocab])]
    kv_shape: list[str | int | None] = [1, h.kv_heads, "past", h.head_dim]
    present_shape: list[str | int | None] = [1, h.kv_heads, "total", h.head_dim]
    b.node("SimplifiedLayerNormalization", ["embeds", b.constant("norm.0", model.vector("blk.0.attn_norm.weight"))],
           ["x.0"], axis=-1, epsilon=h.norm_eps)  # fmt: skip
    residual = "embeds"
    for i in range(h.layers):
        prefix = f"blk.{i}"
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}.{i}", TensorProto.FLOAT, kv_shape))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}.{i}", TensorProto.FLOAT, present_shape))
        qkv = concatenated([model.linear(f"{prefix}.attn_{part}.weight") for part in ("q", "k", "v")])
        b.linear(f"x.{i}", qkv, f"{prefix}.qkv")
        b.node(
            "GroupQueryAttention",
            [f"{prefix}.qkv", "", "", f"past_key.{i}", f"past_value.{i}", "seqlens_k", "total_length",
             "cos_cache", "sin_cache"],
            [f"{prefix}.attention", f"present_key.{i}", f"present_value.{i}"],
            domain="com.microsoft",
            num_heads=h.heads,
            kv_num_heads=h.kv_heads,
            do_rotary=1,
            rotary_interleaved=1,
        )  # fmt: skip
        b.linear(f"{prefix}.attention", model.linear(f"{prefix}.attn_output.weight"), f"{prefix}.out")
        b.node(
            "SkipSimplifiedLayerNormalization",
            [f"{prefix}.out", residual, b.constant(f"{prefix}.ffn_norm", model.vector(f"{prefix}.ffn_norm.weight"))],
            [f"{prefix}.ffn_in", "", "", f"{prefix}.mid"],
            domain="com.microsoft",
            epsilon=h.norm_eps,
        )
        gate_up = concatenated([model.linear(f"{prefix}.ffn_{part}.weight") for part in ("gate", "up")])
        b.linear(f"{prefix}.ffn_in", gate_up, f"{prefix}.gate_up")
        b.node("Split", [f"{prefix}.gate_up"], [f"{prefix}.gate", f"{prefix}.up"], axis=-1, num_outputs=2)
        b.node("Sigmoid", [f"{prefix}.gate"], [f"{prefix}.sigmoid"])
        b.node("Mul", [f"{prefix}.gate", f"{prefix}.sigmoid"], [f"{prefix}.silu"])
        b.node("Mul", [f"{prefix}.silu", f"{prefix}.up"], [f"{prefix}.act"])
        b.linear(f"{prefix}.act", model.linear(f"{prefix}.ffn_down.weight"), f"{prefix}.down")
        following = f"blk.{i + 1}.attn_norm.weight" if i + 1 < h.layers else "output_norm.weight"
        b.node(
            "SkipSimplifiedLayerNormalization",
            [f"{prefix}.down", f"{prefix}.mid", b.constant(f"{prefix}.next_norm", model.vector(following))],
            [f"x.{i + 1}", "", "", f"{prefix}.end"],
            domain="com.microsoft",
            epsilon=h.norm_eps,
        )
        residual = f"{prefix}.end"
    b.node("Gather", [f"x.{h.layers}", "last"], ["final"], axis=1)
    b.linear("final", model.output(), "logits")
    graph = helper.make_graph(b.nodes, "llama_decoder", inputs, outputs, b.initializers)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )


def _write_model(model: GGUFModel, directory: Path) -> None:
    """Everything a load needs, so that loading never parses the GGUF again (`GGUFReader` takes
    ~7-10 s for SmolLM2's 49,152-token vocabulary on a loaded 2-core machine)."""
    import onnx

    from vixio.providers.agent.ort.text import build_tokenizer

    onnx.save_model(
        build_graph(model), str(directory / GRAPH_NAME), save_as_external_data=True, location="weights.bin",
        size_threshold=1024,
    )  # fmt: skip
    embeddings = model.linear("token_embd.weight")
    np.save(directory / "embeddings.q.npy", embeddings.packed)
    np.save(directory / "embeddings.scales.npy", embeddings.scales)
    if embeddings.offsets is not None:
        np.save(directory / "embeddings.offsets.npy", embeddings.offsets)
    tokens = list(model.field("tokenizer.ggml.tokens"))
    tokenizer = build_tokenizer(
        tokens,
        list(model.field("tokenizer.ggml.merges")),
        list(model.field("tokenizer.ggml.token_type")),
        str(model.field("tokenizer.ggml.pre", "default")),
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    eos = int(model.field("tokenizer.ggml.eos_token_id"))
    meta = {
        "hyper": asdict(model.hyper),
        "embedding_bits": embeddings.bits,
        "chat_template": str(model.field("tokenizer.chat_template", "")),
        "stop_tokens": sorted({eos, *(tokens.index(t) for t in END_OF_GENERATION if t in tokens)}),
        "bos": int(model.field("tokenizer.ggml.bos_token_id", -1)),
        "add_bos": bool(model.field("tokenizer.ggml.add_bos_token", False)),
        "source": model.path.name,
    }
    (directory / "meta.json").write_text(json.dumps(meta, indent=1))


def cached_model(gguf_path: Path, digest: str | None = None) -> Path:
    """The directory of `gguf_path`'s built model in the model cache (built first when missing):
    the graph and its weights, the token embeddings, tokenizer.json and meta.json."""
    digest = digest or file_sha256(gguf_path)
    target = cache_dir() / "onnx-llm" / f"{gguf_path.stem}-{digest[:16]}-v{BUILDER_VERSION}"
    if (target / "meta.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Workers starting together: one builds, the others wait for it (two builds at once on two
    # cores took 37 s each in `make serve`'s first start).
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "meta.json").is_file():
            _build(gguf_path, target)
    return target


def _build(gguf_path: Path, target: Path) -> None:
    started = time.perf_counter()
    logger.info("building the ONNX model of {} (once, into {}; ~20-40 s on 2 cores)", gguf_path.name, target)
    building = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        _write_model(GGUFModel(gguf_path), building)
        os.chmod(building, 0o755)  # mkdtemp makes 0700; a shared cache must stay readable
        for path in building.iterdir():
            os.chmod(path, 0o644)
        try:
            building.rename(target)
        except OSError:  # another worker renamed its copy first: use that one
            if not (target / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    logger.info("built the ONNX model of {} in {:.1f} s", gguf_path.name, time.perf_counter() - started)
