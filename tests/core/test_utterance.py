"""`speech_span`: wherever an utterance was cut, the recogniser gets the same samples."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.core.utterance import PAD_SECONDS, speech_span

pytestmark = pytest.mark.unit

RATE = 16000


def speech() -> np.ndarray:
    """A syllable-like burst: a decaying chirp with a quiet onset, so the floor decides the edges."""
    t = np.arange(int(0.8 * RATE)) / RATE
    envelope = np.minimum(t / 0.05, 1.0) * np.exp(-2 * t)
    return (12000 * envelope * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype("<i2")


@pytest.mark.parametrize("lead", [0, 64, 960, 1111, 4800])
@pytest.mark.parametrize("tail", [0, 2400, 8000])
def test_the_same_speech_cut_anywhere_gives_the_same_samples(lead: int, tail: int) -> None:
    noise = np.random.default_rng(lead + tail).integers(-40, 40, lead + tail).astype("<i2")  # under the floor
    cut = np.concatenate([noise[:lead], speech(), noise[lead:]])
    reference = speech_span(speech().tobytes(), RATE)
    assert speech_span(cut.tobytes(), RATE) == reference
    assert len(reference) // 2 < speech().size + 2 * PAD_SECONDS * RATE + 1


def test_silence_and_nothing_pass_as_they_are() -> None:
    quiet = np.full(1600, 20, dtype="<i2").tobytes()
    assert speech_span(quiet, RATE) == quiet and speech_span(b"", RATE) == b""
