"""A Llama-architecture GGUF read into what onnxruntime's `MatMulNBits` takes, with numpy.

Read with the `gguf` package (pure Python + numpy: the tensors are memory-mapped, the metadata
parsed). The hyperparameters all come from the file's metadata (`<arch>.block_count`, ...).

Quantized weights keep their bits, so the graph is ~as small as the file (SmolLM2-135M Q4_1:
the GGUF is 92 MB):
- Q4_0 (`(q - 8) * d`) and Q8_0 (`q * d`) are exactly `MatMulNBits` without zero points (4 and 8
  bits, blocks of 32; Q8_0's int8 is stored offset by 128, the op's default zero point);
- Q4_1 (`q * d + m`, a float minimum per block) is not: the op's float zero points run a
  dequantize-then-GEMM fallback (4.4 ms against 85 us for a 576x1536 product, one thread), and
  uint8 ones round `-m/d`. So the weight is split exactly into `(q - 8) * d` (the fast op) plus a
  per-block constant `m + 8d`, whose product with the input is `blocksum(x) @ offsets`, a matrix
  32x smaller than the weight (`QuantizedLinear.offsets`);
- anything else (F16, F32, K-quants) is dequantized by `gguf.quants` and requantized to 8 bits
  in blocks of 32 (symmetric), which loses far less than 4-bit formats already have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BLOCK = 32
"""Elements per quantization block (ggml's QK4_0/QK4_1/QK8_0, and MatMulNBits' block_size)."""


@dataclass(frozen=True)
class Hyper:
    """The hyperparameters of a Llama-architecture model, from its GGUF metadata."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_base: float
    norm_eps: float
    context: int


@dataclass(frozen=True)
class QuantizedLinear:
    """`x @ W.T` for W (n, k) as MatMulNBits inputs (see the module docstring)."""

    n: int
    k: int
    bits: int
    packed: np.ndarray
    """uint8 (n, k / 32, 32 * bits / 8): MatMulNBits' B."""
    scales: np.ndarray
    """float32 (n, k / 32)."""
    offsets: np.ndarray | None = None
    """float32 (k / 32, n): added as blocksum(x) @ offsets (Q4_1's minimums), or None."""

    def dequantized(self) -> np.ndarray:
        """W (n, k) in float32: the reference the graph's products are checked against."""
        return self.rows(np.arange(self.n))

    def rows(self, index: np.ndarray) -> np.ndarray:
        """Rows of W in float32 (token embeddings are looked up this way, outside the graph)."""
        packed = self.packed[index]
        if self.bits == 4:
            q = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(len(index), -1, BLOCK)
        else:
            q = packed.reshape(len(index), -1, BLOCK)
        w: np.ndarray = (q.astype(np.float32) - float(1 << (self.bits - 1))) * self.scales[index][:, :, None]
        if self.offsets is not None:
            w += self.offsets.T[index][:, :, None]
        return w.reshape(len(index), self.k)


def concatenated(parts: list[QuantizedLinear]) -> QuantizedLinear:
    """One product for several weights of one input (Q, K and V; gate and up): outputs side by side."""
    if len({(p.k, p.bits, p.offsets is None) for p in parts}) != 1:
        return concatenated([requantized(p.dequantized()) for p in parts])
    offsets = (
        None if parts[0].offsets is None else np.concatenate([p.offsets for p in parts if p.offsets is not None], 1)
    )
    return QuantizedLinear(
        n=sum(p.n for p in parts),
        k=parts[0].k,
        bits=parts[0].bits,
        packed=np.concatenate([p.packed for p in parts]),
        scales=np.concatenate([p.scales for p in parts]),
        offsets=offsets,
    )


def requantized(w: np.ndarray) -> QuantizedLinear:
    """A float weight (n, k) as symmetric 8-bit blocks of 32."""
    n, k = w.shape
    blocks = w.astype(np.float32).reshape(n, k // BLOCK, BLOCK)
    scales = np.abs(blocks).max(axis=-1) / 127.0
    q = np.round(blocks / np.where(scales == 0, 1, scales)[:, :, None]).clip(-127, 127)
    return QuantizedLinear(n, k, 8, (q + 128).astype(np.uint8), scales.astype(np.float32))


def linear_from_gguf(tensor: Any) -> QuantizedLinear:
    """A GGUF weight tensor (ggml shape [k, n]: n rows of k) as a `QuantizedLinear`."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize

    k, n = (int(x) for x in tensor.shape[:2])
    if k % BLOCK:
        raise ValueError(f"{tensor.name}: rows of {k} are not whole blocks of {BLOCK}")
    raw = np.asarray(tensor.data).view(np.uint8).reshape(n, k // BLOCK, -1)
    kind = tensor.tensor_type
    if kind == Q.Q8_0:  # [d: f16][q: 32 x int8]
        scales = raw[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float32)
        q = raw[:, :, 2:].view(np.int8).astype(np.int16) + 128
        return QuantizedLinear(n, k, 8, q.astype(np.uint8), scales)
    if kind in (Q.Q4_0, Q.Q4_1):  # [d: f16]([m: f16])[16 bytes: element j low nibble, j + 16 high]
        head = 2 if kind == Q.Q4_0 else 4
        halves = raw[:, :, :head].copy().view(np.float16).astype(np.float32)
        nibbles = raw[:, :, head:]
        q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # (n, blocks, 32) in element order
        packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)  # MatMulNBits: element 2i low
        scales = halves[:, :, 0]
        offsets = None if kind == Q.Q4_0 else (halves[:, :, 1] + 8.0 * scales).T.copy()
        return QuantizedLinear(n, k, 4, packed, scales, offsets)
    return requantized(np.asarray(dequantize(tensor.data, kind), dtype=np.float32).reshape(n, k))


def vector(tensor: Any) -> np.ndarray:
    """A norm weight (F32 in every GGUF seen; anything else dequantized)."""
    from gguf.quants import dequantize

    return np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(-1)


class GGUFModel:
    """A Llama-architecture GGUF file: metadata, hyperparameters, tensors by name."""

    def __init__(self, path: Path) -> None:
        from gguf import GGUFReader

        self.path = path
        self.reader = GGUFReader(str(path))
        self.tensors = {tensor.name: tensor for tensor in self.reader.tensors}
        self.arch = str(self.field("general.architecture"))
        if self.arch != "llama":
            raise ValueError(f"{path.name}: architecture {self.arch!r}; the ONNX runtime builds Llama models only")
        hidden = int(self.field(f"{self.arch}.embedding_length"))
        heads = int(self.field(f"{self.arch}.attention.head_count"))
        self.hyper = Hyper(
            layers=int(self.field(f"{self.arch}.block_count")),
            hidden=hidden,
            ffn=int(self.field(f"{self.arch}.feed_forward_length")),
            heads=heads,
            kv_heads=int(self.field(f"{self.arch}.attention.head_count_kv", heads)),
            head_dim=int(self.field(f"{self.arch}.rope.dimension_count", hidden // heads)),
            vocab=len(self.field("tokenizer.ggml.tokens")),
            rope_base=float(self.field(f"{self.arch}.rope.freq_base", 10000.0)),
            norm_eps=float(self.field(f"{self.arch}.attention.layer_norm_rms_epsilon", 1e-5)),
            context=int(self.field(f"{self.arch}.context_length", 2048)),
        )

    def field(self, key: str, default: Any = None) -> Any:
        """A metadata value (strings decoded, arrays as lists), or `default` when absent."""
        field = self.reader.fields.get(key)
        if field is None:
            if default is None:
                raise KeyError(f"{self.path.name} has no {key!r} in its metadata")
            return default
        return field.contents()

    def linear(self, name: str) -> QuantizedLinear:
        return linear_from_gguf(self.tensors[name])

    def vector(self, name: str) -> np.ndarray:
        return vector(self.tensors[name])

    def output(self) -> QuantizedLinear:
        """The output projection: `output.weight`, or the token embeddings when tied (SmolLM2)."""
        return self.linear("output.weight" if "output.weight" in self.tensors else "token_embd.weight")
