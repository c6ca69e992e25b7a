"""A speaker encoder on ONNX Runtime: 16 kHz speech in, a unit vector out (cosine = similarity).

The default weights are Resemblyzer's (`pip install --no-deps resemblyzer==0.1.4`: a 17 MB
`pretrained.pt` inside the package, Apache-2.0; installed in 3 s. Its own code needs torch, and
with its dependencies pip resolves torch, triton and 18 NVIDIA CUDA packages on Linux, so only the
file is used). `torch_legacy.py` reads it with numpy; `_graph` rebuilds the
network (3 LSTM layers, a linear layer, ReLU, L2 norm) as an ONNX graph, so inference runs on
the onnxruntime vixio already ships for Silero and Piper. The mel front end is librosa's
(`melspectrogram`, Slaney filters, 25 ms Hann windows every 10 ms) in numpy.

An owner's model: `speakers.model` may name another checkpoint of the same architecture (any
hidden size) or an `.onnx` file that takes `mels` (batch, 160, 40) and returns (batch, dim).

Measured (bench/bench_speaker.py): see docs/speakers.md.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 40
PARTIAL_FRAMES = 160
"""1.6 s of frames per partial utterance (the network was trained on these)."""
PARTIALS_PER_SECOND = 1.3
MIN_COVERAGE = 0.75
TARGET_DBFS = -30.0


def bundled_weights() -> Path | None:
    """Resemblyzer's `pretrained.pt`, found without importing the package (its import loads torch)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    return path if path.exists() else None


def _slaney_mel(hz: np.ndarray | float) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    mel = hz / (200.0 / 3)
    log_part = hz >= 1000.0
    return np.where(log_part, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def _slaney_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), mel * (200.0 / 3))


def mel_filters() -> np.ndarray:
    """librosa.filters.mel(sr=16000, n_fft=400, n_mels=40) (Slaney scale and area norm): (40, 201)."""
    fft_hz = np.linspace(0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    mel_hz = _slaney_hz(np.linspace(_slaney_mel(0.0), _slaney_mel(SAMPLE_RATE / 2), N_MELS + 2))
    ramps = mel_hz[:, None] - fft_hz[None, :]
    widths = np.diff(mel_hz)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_hz[2:] - mel_hz[:-2]))[:, None]
    return weights.astype(np.float32)


_FILTERS = mel_filters()
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)


def mel_frames(wav: np.ndarray) -> np.ndarray:
    """Power mel spectrogram (frames, 40), frames centred as librosa does (zero padding)."""
    padded = np.pad(wav.astype(np.float32), N_FFT // 2)
    count = 1 + (len(padded) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(
        padded, shape=(count, N_FFT), strides=(padded.strides[0] * HOP, padded.strides[0])
    )
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=1)) ** 2
    return (power.astype(np.float32) @ _FILTERS.T).astype(np.float32)


def normalize_volume(wav: np.ndarray) -> np.ndarray:
    """Raise quiet speech to -30 dBFS (never lowers it), as Resemblyzer's preprocessing does."""
    power = float(np.mean(np.square(wav, dtype=np.float64))) if len(wav) else 0.0
    if power <= 0:
        return wav
    change = TARGET_DBFS - 10 * np.log10(power)
    return wav if change < 0 else (wav * 10 ** (change / 20)).astype(np.float32)


def partial_starts(n_samples: int) -> list[int]:
    """First frame of each 160-frame partial covering the utterance (Resemblyzer's slicing)."""
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    step = int(np.round((SAMPLE_RATE / PARTIALS_PER_SECOND) / HOP))
    starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
    coverage = (n_samples - starts[-1] * HOP) / (PARTIAL_FRAMES * HOP)
    if coverage < MIN_COVERAGE and len(starts) > 1:
        starts.pop()
    return starts


def _graph(state: dict[str, np.ndarray]) -> bytes:
    """The checkpoint's network as a serialized ONNX model: mels (B, T, 40) -> unit vectors (B, D)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    layers = sum(1 for key in state if key.startswith("lstm.weight_ih_l"))
    hidden = state["lstm.weight_hh_l0"].shape[1]
    # PyTorch stacks the gates i, f, g, o; ONNX wants i, o, f, c.
    order = np.concatenate(
        [
            np.arange(0, hidden),
            np.arange(3 * hidden, 4 * hidden),
            np.arange(hidden, 2 * hidden),
            np.arange(2 * hidden, 3 * hidden),
        ]
    )
    inits, nodes = [], [helper.make_node("Transpose", ["mels"], ["x0"], perm=[1, 0, 2])]
    for layer in range(layers):
        w = state[f"lstm.weight_ih_l{layer}"][order][None]
        r = state[f"lstm.weight_hh_l{layer}"][order][None]
        b = np.concatenate([state[f"lstm.bias_ih_l{layer}"][order], state[f"lstm.bias_hh_l{layer}"][order]])[None]
        for name, value in (("W", w), ("R", r), ("B", b)):
            inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}{layer}"))
        nodes.append(
            helper.make_node(
                "LSTM",
                [f"x{layer}", f"W{layer}", f"R{layer}", f"B{layer}"],
                [f"y{layer}", f"h{layer}"],
                hidden_size=hidden,
            )
        )
        if layer + 1 < layers:
            nodes.append(helper.make_node("Squeeze", [f"y{layer}", "axis1"], [f"x{layer + 1}"]))
    inits += [
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
        numpy_helper.from_array(state["linear.weight"].T.astype(np.float32).copy(), "LW"),
        numpy_helper.from_array(state["linear.bias"].astype(np.float32), "LB"),
    ]
    last = layers - 1
    nodes += [
        helper.make_node("Squeeze", [f"h{last}", "axis0"], ["hidden"]),
        helper.make_node("MatMul", ["hidden", "LW"], ["projected"]),
        helper.make_node("Add", ["projected", "LB"], ["biased"]),
        helper.make_node("Relu", ["biased"], ["raw"]),
        helper.make_node("LpNormalization", ["raw"], ["embedding"], axis=1, p=2),
    ]
    dim = state["linear.weight"].shape[0]
    graph = helper.make_graph(
        nodes,
        "speaker_encoder",
        [helper.make_tensor_value_info("mels", TensorProto.FLOAT, ["batch", "frames", N_MELS])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


class SpeakerEncoder:
    """Embeds utterances; thread-safe (one onnxruntime session, `run` may be called from any thread)."""

    def __init__(self, model: str | Path = "resemblyzer", *, threads: int = 1) -> None:
        try:
            import onnxruntime
        except ImportError as exc:
            raise ImportError(
                "speaker identification needs onnxruntime and onnx: pip install 'vixio[speaker]'"
            ) from exc
        self.source = str(model)
        if str(model) == "resemblyzer":
            path = bundled_weights()
            if path is None:
                raise FileNotFoundError(
                    "speakers.model 'resemblyzer' needs Resemblyzer's weights: "
                    "pip install --no-deps resemblyzer==0.1.4 (the file only; its torch is not used)"
                )
        else:
            path = Path(model)
            if not path.exists():
                raise FileNotFoundError(f"speakers.model: {path} does not exist")
        if path.suffix == ".onnx":
            serialized: Any = str(path)
        else:
            from vixio.providers.speaker.torch_legacy import load_state

            state = load_state(path)
            serialized = _graph(state.get("model_state", state))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
        self.dim = int(self._session.get_outputs()[0].shape[1])
        self._lock = threading.Lock()

    def embed(self, pcm: np.ndarray) -> np.ndarray:
        """The unit vector of one utterance: int16 or float samples at 16 kHz (mono)."""
        wav = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)
        wav = normalize_volume(wav)
        starts = partial_starts(len(wav))
        need = (starts[-1] + PARTIAL_FRAMES) * HOP
        if len(wav) < need:
            wav = np.pad(wav, (0, need - len(wav)))
        mels = mel_frames(wav)
        batch = np.stack([mels[start : start + PARTIAL_FRAMES] for start in starts])
        (partials,) = self._session.run(["embedding"], {"mels": batch})
        mean = partials.mean(axis=0)
        return (mean / max(float(np.linalg.norm(mean)), 1e-9)).astype(np.float32)
