"""SileroTorchVAD: the silero-vad package on torch (optional; skipped without torch)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from vixio.providers.vad import SileroTorchVAD, VoiceActivityDetector, silero_torch

pytestmark = pytest.mark.models

HAVE_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("silero_vad") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs vixio[silero-torch] (torch + silero-vad)")


@pytest.mark.skipif(HAVE_TORCH, reason="torch is installed")
def test_missing_torch_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r"vixio\[silero-torch\]"):
        SileroTorchVAD()


@needs_torch
def test_one_model_shared_by_100_streams(speech) -> None:
    providers = [SileroTorchVAD(), SileroTorchVAD()]
    assert silero_torch.model_loads() == 1
    assert providers[0]._network is providers[1]._network
    streams = [providers[i % 2].create_stream() for i in range(100)]
    window = np.zeros(512, dtype=np.float32)
    assert all(stream.probability(window) < 0.1 for stream in streams)
    assert silero_torch.model_loads() == 1


@needs_torch
def test_matches_the_packaged_stateful_wrapper(speech) -> None:
    """Our per-stream state must reproduce what silero's own wrapper computes."""
    import torch
    from silero_vad import load_silero_vad

    samples, rate = speech.load("weather.wav")
    audio = samples.astype(np.float32) / 32768
    windows = audio[: audio.shape[0] // 512 * 512].reshape(-1, 512)
    reference = load_silero_vad(onnx=False)
    expected = [reference(torch.from_numpy(window.copy()), rate).item() for window in windows]
    stream = SileroTorchVAD(rate).create_stream()
    ours = [stream.probability(window.copy()) for window in windows]
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    assert max(ours) > 0.9


@needs_torch
def test_detects_speech_padded_with_silence(speech) -> None:
    samples, rate = speech.load("volume.wav")
    audio = np.concatenate((np.zeros(rate, np.int16), samples, np.zeros(rate * 3 // 2, np.int16)))
    detector = VoiceActivityDetector(SileroTorchVAD().create_stream())
    events = [
        event for offset in range(0, audio.shape[0], 960) for event in detector.feed(audio[offset : offset + 960])
    ]
    assert [event.type for event in events] == ["start", "end"]
