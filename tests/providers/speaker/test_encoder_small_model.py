"""The speaker encoder's loading code on a small model made here (an owner's model file): a
legacy-format PyTorch checkpoint written byte by byte as torch < 1.6 writes it, and the ONNX file
`_graph` makes of it; both must compute what PyTorch's LSTM equations compute (numpy below)."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="needs vixio[speaker]")
pytest.importorskip("onnx", reason="needs vixio[speaker]")

from vixio.providers.speaker import encoder as enc  # noqa: E402
from vixio.providers.speaker.torch_legacy import load_state  # noqa: E402

pytestmark = pytest.mark.unit

HIDDEN, LAYERS, DIM = 8, 2, 6


def small_state(seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    state: dict[str, np.ndarray] = {}
    for layer in range(LAYERS):
        inputs = enc.N_MELS if layer == 0 else HIDDEN
        state[f"lstm.weight_ih_l{layer}"] = rng.normal(0, 0.3, (4 * HIDDEN, inputs)).astype(np.float32)
        state[f"lstm.weight_hh_l{layer}"] = rng.normal(0, 0.3, (4 * HIDDEN, HIDDEN)).astype(np.float32)
        state[f"lstm.bias_ih_l{layer}"] = rng.normal(0, 0.1, 4 * HIDDEN).astype(np.float32)
        state[f"lstm.bias_hh_l{layer}"] = rng.normal(0, 0.1, 4 * HIDDEN).astype(np.float32)
    state["linear.weight"] = rng.normal(0, 0.5, (DIM, HIDDEN)).astype(np.float32)
    state["linear.bias"] = np.abs(rng.normal(0, 0.1, DIM)).astype(np.float32)
    return state


def reference(state: dict[str, np.ndarray], mels: np.ndarray) -> np.ndarray:
    """PyTorch's nn.LSTM (gates i, f, g, o), last layer's final hidden, linear, ReLU, L2 norm."""

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-x))

    x = mels.astype(np.float64)
    for layer in range(LAYERS):
        w, r = state[f"lstm.weight_ih_l{layer}"], state[f"lstm.weight_hh_l{layer}"]
        b = state[f"lstm.bias_ih_l{layer}"] + state[f"lstm.bias_hh_l{layer}"]
        h = np.zeros((x.shape[0], HIDDEN))
        c = np.zeros((x.shape[0], HIDDEN))
        outputs = []
        for t in range(x.shape[1]):
            gates = x[:, t] @ w.T + h @ r.T + b
            i, f, g, o = np.split(gates, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            outputs.append(h)
        x = np.stack(outputs, axis=1)
    raw = np.maximum(0, h @ state["linear.weight"].T + state["linear.bias"])
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


class _Storage:
    """Pickles as torch.FloatStorage's persistent id does."""


def write_legacy_checkpoint(path: Path, state: dict[str, np.ndarray]) -> None:
    """`torch.save({"model_state": state}, path, _use_new_zipfile_serialization=False)`, without torch."""
    keys = [str(n) for n in range(len(state))]

    class Writer(pickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            if isinstance(obj, tuple) and obj and obj[0] == "__storage__":
                return ("storage", FloatStorage, obj[1], "cpu", obj[2])
            return None

    class Rebuild:
        def __init__(self, key: str, value: np.ndarray) -> None:
            self.key, self.value = key, value

        def __reduce__(self) -> tuple[object, tuple[object, ...]]:
            strides, acc = [], 1
            for size in reversed(self.value.shape):
                strides.insert(0, acc)
                acc *= size
            return (
                _rebuild_tensor_v2,
                (("__storage__", self.key, self.value.size), 0, self.value.shape, tuple(strides), False, {}),
            )

    with path.open("wb") as out:
        for header in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}):
            pickle.dump(header, out, protocol=2)
        Writer(out, protocol=2).dump(
            {"model_state": {name: Rebuild(key, value) for key, (name, value) in zip(keys, state.items(), strict=True)}}
        )
        pickle.dump(keys, out, protocol=2)
        for value in state.values():
            out.write(struct.pack("<q", value.size))
            out.write(np.ascontiguousarray(value, dtype="<f4").tobytes())


# Module-level stand-ins pickled under torch's names (pickle records module and qualified name).
def _rebuild_tensor_v2(*args: object) -> None:  # pragma: no cover - never called, only named
    raise AssertionError


class FloatStorage:  # pragma: no cover - only named
    pass


_rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
FloatStorage.__module__ = "torch"


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, np.ndarray]]:
    import sys
    import types

    # pickle checks that the names it writes resolve to the same objects.
    torch = types.ModuleType("torch")
    torch.FloatStorage = FloatStorage  # type: ignore[attr-defined]
    utils = types.ModuleType("torch._utils")
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    state = small_state()
    path = tmp_path / "encoder.pt"
    write_legacy_checkpoint(path, state)
    return path, state


def test_a_legacy_checkpoint_reads_back_every_tensor_exactly(checkpoint: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, state = checkpoint
    loaded = load_state(path)["model_state"]
    assert list(loaded) == list(state)
    for name, value in state.items():
        np.testing.assert_array_equal(loaded[name], value)


def test_the_onnx_graph_computes_pytorchs_lstm(checkpoint: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, state = checkpoint
    model = enc.SpeakerEncoder(path)
    assert model.dim == DIM
    mels = np.abs(np.random.default_rng(1).normal(0, 1, (3, 20, enc.N_MELS))).astype(np.float32)
    (got,) = model._session.run(["embedding"], {"mels": mels})
    np.testing.assert_allclose(got, reference(state, mels), atol=1e-5)


def test_an_owners_onnx_file_loads_and_embeds(tmp_path: Path) -> None:
    state = small_state(seed=5)
    onnx_file = tmp_path / "owner.onnx"
    onnx_file.write_bytes(enc._graph(state))
    model = enc.SpeakerEncoder(onnx_file)
    speech = (np.sin(np.arange(32000) * 0.05) * 8000).astype(np.int16)
    vector = model.embed(speech)
    assert vector.shape == (DIM,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-5
    starts = enc.partial_starts(len(speech))
    padded = np.pad(
        enc.normalize_volume(speech.astype(np.float32) / 32768),
        (0, (starts[-1] + enc.PARTIAL_FRAMES) * enc.HOP - len(speech)),
    )
    mels = enc.mel_frames(padded)
    expected = reference(state, np.stack([mels[s : s + enc.PARTIAL_FRAMES] for s in starts])).mean(axis=0)
    np.testing.assert_allclose(vector, expected / np.linalg.norm(expected), atol=1e-4)


def test_a_missing_or_foreign_model_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere.pt"):
        enc.SpeakerEncoder(tmp_path / "nowhere.pt")
    bogus = tmp_path / "bogus.pt"
    bogus.write_bytes(pickle.dumps({"not": "a checkpoint"}))
    with pytest.raises(ValueError, match="bogus.pt"):
        enc.SpeakerEncoder(bogus)


def test_mel_filters_put_a_tone_in_the_band_around_its_frequency() -> None:
    filters = enc.mel_filters()
    assert filters.shape == (enc.N_MELS, 1 + enc.N_FFT // 2) and (filters >= 0).all()
    tone = np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000).astype(np.float32)
    band = int(np.argmax(enc.mel_frames(tone).mean(axis=0)))
    centres = enc._slaney_hz(np.linspace(enc._slaney_mel(0.0), enc._slaney_mel(8000.0), enc.N_MELS + 2))[1:-1]
    assert band == int(np.argmin(np.abs(centres - 1000)))
    # Slaney's scale is linear below 1 kHz (66.7 Hz a mel) and logarithmic above.
    assert enc._slaney_mel(np.array([200.0]))[0] == pytest.approx(3.0)
    assert enc._slaney_hz(enc._slaney_mel(np.array([4000.0])))[0] == pytest.approx(4000.0)


def test_partials_cover_the_utterance_as_resemblyzer_slices_it() -> None:
    assert enc.partial_starts(8000) == [0]  # shorter than one partial: one, zero-padded
    assert enc.partial_starts(16000 * 3) == [0, 77, 154]  # 1.3 partials a second, 77 frames apart
    assert enc.partial_starts(30000) == [0]  # the second would cover 0.69 of its frames: dropped
    assert enc.partial_starts(32000) == [0, 77]  # 0.77: kept, zero-padded
