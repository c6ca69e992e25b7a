"""Silero VAD's 16 kHz network rebuilt as matrix products over the whole batch (ONNX bytes).

The published `silero_vad.onnx` computes its STFT and its four encoder layers as `Conv` nodes on
4, 2 and 1 time steps. onnxruntime runs a Conv batch item by batch item (im2col, then a GEMM whose
output has 1-4 columns), so a batch of 32 windows costs ~56 µs a window, the same as 8: the
weights are streamed once per window. The same arithmetic as one `MatMul` per layer over all the
batch's time steps (a [B·steps, taps·channels] × [taps·channels, out] product) costs ~15 µs a
window from a batch of 16 up and ~57 instead of ~110 µs for a lone window (2-core VM).

`batched_16k_model(path)` reads the 16 kHz weights out of the model file and returns the rebuilt
graph (inputs `input` [B, 576] = 64 context samples + a 512-sample window, `state` [2, B, 128];
outputs `output` [B, 1], `stateN` [2, B, 128] — the original's, without `sr`), or None with the
reason when the file is not laid out as Silero v5/v6 is. Building needs the `onnx` package (only
here, at load time). The rebuilt layers, in order:

    reflect-pad 64 → frames [B, 4, 256] → × STFT basis → magnitude [B, 4, 129]
    → conv k3 s1 → ReLU → conv k3 s2 → ReLU → conv k3 s2 → ReLU → conv k3 s1 → ReLU  [B, 128]
    → LSTM cell (gates i, f, g, o) → ReLU → 1×1 conv → sigmoid

Sums run in another order than onnxruntime's Conv kernels, so results differ in the 7th digit;
`silero_onnx` checks every rebuilt model against the original at load and keeps the original
when they disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

WINDOW = 512
CONTEXT = 64
_PREFIX = "If_0_then_branch__Inline_0__"
"""How the 16 kHz branch's names are prefixed inside the model's top-level `If` on `sr`."""
_SHAPES = {
    "stft.forward_basis_buffer": (258, 1, 256),
    "encoder.0.reparam_conv.weight": (128, 129, 3),
    "encoder.0.reparam_conv.bias": (128,),
    "encoder.1.reparam_conv.weight": (64, 128, 3),
    "encoder.1.reparam_conv.bias": (64,),
    "encoder.2.reparam_conv.weight": (64, 64, 3),
    "encoder.2.reparam_conv.bias": (64,),
    "encoder.3.reparam_conv.weight": (128, 64, 3),
    "encoder.3.reparam_conv.bias": (128,),
    "decoder.rnn.weight_ih": (512, 128),
    "decoder.rnn.weight_hh": (512, 128),
    "decoder.rnn.bias_ih": (512,),
    "decoder.rnn.bias_hh": (512,),
    "decoder.decoder.2.weight": (1, 128, 1),
    "decoder.decoder.2.bias": (1,),
}
"""The 16 kHz branch's weights, by the names the Silero v5/v6 export gives them."""


class UnexpectedModel(ValueError):
    """The model file is not laid out as the Silero v5/v6 export."""


def batched_16k_model(path: str | Path) -> tuple[bytes | None, str]:
    """The rebuilt 16 kHz graph of the Silero model at `path` and "", or None and why not."""
    try:
        import onnx  # noqa: F401 - only to build; the server runs the bytes on onnxruntime
    except ImportError as exc:
        return None, f"the onnx package is missing ({exc}; it comes with vixio[silero])"
    try:
        return _build(_weights_16k(path)), ""
    except UnexpectedModel as exc:
        return None, str(exc)


def _weights_16k(path: str | Path) -> dict[str, np.ndarray]:
    """The named constants of the 16 kHz branch (the `If` on `sr == 16000`)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    branches = [node for node in graph.node if node.op_type == "If"]
    constants = [node for node in graph.node if node.op_type == "Constant"]
    if len(branches) != 1 or len(constants) != 1 or int(numpy_helper.to_array(constants[0].attribute[0].t)) != 16000:
        raise UnexpectedModel("no single If on sr == 16000 at the top of the graph")
    then = next((a.g for a in branches[0].attribute if a.name == "then_branch"), None)
    if then is None:
        raise UnexpectedModel("the sr If has no then_branch")
    found = {}
    for node in then.node:
        name = node.output[0].removeprefix(_PREFIX) if node.op_type == "Constant" else ""
        if name in _SHAPES:
            found[name] = numpy_helper.to_array(node.attribute[0].t).astype(np.float32)
    for name, shape in _SHAPES.items():
        if name not in found:
            raise UnexpectedModel(f"the 16 kHz branch has no constant {name!r}")
        if found[name].shape != shape:
            raise UnexpectedModel(f"{name} has shape {found[name].shape}, expected {shape}")
    return found


def _conv_taps(weight: np.ndarray, taps: tuple[int, ...]) -> np.ndarray:
    """A Conv1d weight [out, in, k] as the right-hand side of a product with `taps` input steps
    laid side by side: [len(taps) · in, out], tap-major like the columns it multiplies."""
    return np.concatenate([weight[:, :, tap].T for tap in taps], axis=0)


class _GraphBuilder:
    """Nodes and initializers of one graph, with generated names."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self._helper, self._numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._names: set[str] = set()

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        if name not in self._names:
            self._names.add(name)
            array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
            self.initializers.append(self._numpy_helper.from_array(array, name))
        return name

    def ints(self, *values: int) -> str:
        return self.const("i64_" + "_".join(str(v).replace("-", "m") for v in values), list(values), np.int64)

    def op(self, op_type: str, *inputs: str, outputs: int | list[str] = 1, **attributes: Any) -> Any:
        names = outputs if isinstance(outputs, list) else [f"{op_type}_{len(self.nodes)}_{i}" for i in range(outputs)]
        self.nodes.append(self._helper.make_node(op_type, list(inputs), names, **attributes))
        return names[0] if len(names) == 1 else names

    def dense(self, x: str, weight: np.ndarray, bias: np.ndarray, name: str) -> str:
        """ReLU(x · weight + bias)."""
        relu: str = self.op(
            "Relu", self.op("Add", self.op("MatMul", x, self.const(f"{name}_w", weight)), self.const(f"{name}_b", bias))
        )
        return relu


def _build(w: dict[str, np.ndarray]) -> bytes:
    from onnx import TensorProto, helper

    g = _GraphBuilder()
    time_axis = g.ints(1)
    # STFT: reflect-pad 64 samples on the right (x[574] back to x[511]), cut 4 frames of 256 at
    # hop 128 as two [B, 4, 128] halves, and multiply by the basis (129 real + 129 imaginary rows).
    tail = g.op("Slice", "input", g.ints(574), g.ints(510), time_axis, g.ints(-1))
    padded = g.op("Concat", "input", tail, axis=1)  # [B, 640]
    halves = g.ints(-1, 4, 128)
    first = g.op("Reshape", g.op("Slice", padded, g.ints(0), g.ints(512), time_axis), halves)
    second = g.op("Reshape", g.op("Slice", padded, g.ints(128), g.ints(640), time_axis), halves)
    frames = g.op("Concat", first, second, axis=2)  # [B, 4, 256]
    spectrum = g.op("MatMul", frames, g.const("stft_basis", w["stft.forward_basis_buffer"][:, 0, :].T))
    real, imaginary = g.op("Split", spectrum, g.ints(129, 129), outputs=2, axis=2)
    magnitude = g.op("Sqrt", g.op("Add", g.op("Mul", real, real), g.op("Mul", imaginary, imaginary)))
    # encoder.0: kernel 3, padding 1, stride 1 over 4 steps: each step sees steps t-1, t, t+1.
    steps = g.op("Pad", magnitude, g.ints(0, 1, 0, 0, 1, 0))  # [B, 6, 129]
    columns = g.op("Concat", *(g.op("Slice", steps, g.ints(k), g.ints(k + 4), time_axis) for k in range(3)), axis=2)
    hidden = g.dense(
        columns, _conv_taps(w["encoder.0.reparam_conv.weight"], (0, 1, 2)), w["encoder.0.reparam_conv.bias"], "encoder0"
    )  # [B, 4, 128]
    # encoder.1: stride 2 → 2 steps, seeing (pad, h0, h1) and (h1, h2, h3).
    steps = g.op("Pad", hidden, g.ints(0, 1, 0, 0, 0, 0))  # [B, 5, 128]
    taps = g.ints(-1, 1, 384)
    columns = g.op(
        "Concat",
        g.op("Reshape", g.op("Slice", steps, g.ints(0), g.ints(3), time_axis), taps),
        g.op("Reshape", g.op("Slice", steps, g.ints(2), g.ints(5), time_axis), taps),
        axis=1,
    )
    hidden = g.dense(
        columns, _conv_taps(w["encoder.1.reparam_conv.weight"], (0, 1, 2)), w["encoder.1.reparam_conv.bias"], "encoder1"
    )  # [B, 2, 64]
    # encoder.2: stride 2 → 1 step seeing (pad, h0, h1): the padding tap multiplies zeros.
    hidden = g.op("Reshape", hidden, g.ints(-1, 128))
    hidden = g.dense(
        hidden, _conv_taps(w["encoder.2.reparam_conv.weight"], (1, 2)), w["encoder.2.reparam_conv.bias"], "encoder2"
    )  # [B, 64]
    # encoder.3: stride 1 over 1 step: only the centre tap sees data.
    hidden = g.dense(
        hidden, _conv_taps(w["encoder.3.reparam_conv.weight"], (1,)), w["encoder.3.reparam_conv.bias"], "encoder3"
    )  # [B, 128]
    # LSTM cell on state (h, c), PyTorch gate order i, f, g, o.
    h = g.op("Squeeze", g.op("Slice", "state", g.ints(0), g.ints(1), g.ints(0)), g.ints(0))
    c = g.op("Squeeze", g.op("Slice", "state", g.ints(1), g.ints(2), g.ints(0)), g.ints(0))
    gate_weights = np.concatenate([w["decoder.rnn.weight_ih"].T, w["decoder.rnn.weight_hh"].T], axis=0)
    gates = g.op(
        "Add",
        g.op("MatMul", g.op("Concat", hidden, h, axis=1), g.const("lstm_w", gate_weights)),
        g.const("lstm_b", w["decoder.rnn.bias_ih"] + w["decoder.rnn.bias_hh"]),
    )
    gate_in, gate_forget, gate_cell, gate_out = g.op("Split", gates, g.ints(128, 128, 128, 128), outputs=4, axis=1)
    c_next = g.op(
        "Add",
        g.op("Mul", g.op("Sigmoid", gate_forget), c),
        g.op("Mul", g.op("Sigmoid", gate_in), g.op("Tanh", gate_cell)),
    )
    h_next = g.op("Mul", g.op("Sigmoid", gate_out), g.op("Tanh", c_next))
    g.op(
        "Concat", g.op("Unsqueeze", h_next, g.ints(0)), g.op("Unsqueeze", c_next, g.ints(0)), outputs=["stateN"], axis=0
    )
    logit = g.op(
        "Add",
        g.op("MatMul", g.op("Relu", h_next), g.const("decoder_w", w["decoder.decoder.2.weight"][:, :, 0].T)),
        g.const("decoder_b", w["decoder.decoder.2.bias"]),
    )
    g.op("Sigmoid", logit, outputs=["output"])
    graph = helper.make_graph(
        g.nodes,
        "silero_vad_16k_batched",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", CONTEXT + WINDOW]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 128]),
        ],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "batch", 128]),
        ],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8, producer_name="vixio")
    serialized: bytes = model.SerializeToString()  # onnx has no type hints
    return serialized
