"""Measurements on int16 mono PCM shared by the TTS tests."""

from __future__ import annotations

import numpy as np


def pcm_seconds(pcm: bytes, rate: int) -> float:
    """Duration of int16 mono PCM."""
    return len(pcm) / 2 / rate


def speech_fraction(pcm: bytes, rate: int, frame_ms: int = 20) -> float:
    """Share of frames louder than -35 dBFS: near 0 for silence or clicks, well above 0.3 for speech."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768
    frame = rate * frame_ms // 1000
    usable = len(samples) - len(samples) % frame
    if usable == 0:
        return 0.0
    rms = np.sqrt(np.mean(samples[:usable].reshape(-1, frame) ** 2, axis=1))
    return float(np.mean(rms > 10 ** (-35 / 20)))
