"""SessionEchoCanceller keeps the microphone's last 1.5 s for the delay estimates."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("pywebrtc_audio", reason="needs vixio[aec]")


def test_the_microphone_history_is_the_last_window_whatever_the_frame_sizes() -> None:
    from vixio.transports.xiaozhi.aec.canceller import SessionEchoCanceller

    canceller = SessionEchoCanceller()
    window = canceller.estimator.window
    audio = (np.random.default_rng(0).standard_normal(200_000) * 3000).astype(np.int16)
    assert not canceller._recent(window).any()  # nothing heard yet: silence
    at = 0
    for size in [960, 320, 1920, 960, 480] * 40:  # no stamps: every frame passes, and is remembered
        assert canceller.process(audio[at : at + size].tobytes(), 0) == audio[at : at + size].tobytes()
        at += size
        keep = min(at, window)
        assert np.array_equal(canceller._recent(window)[window - keep :], audio[at - keep : at]), at
