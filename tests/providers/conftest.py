"""Speech fixtures for these tests: WAVs made by scripts/make_speech_fixtures.py."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest

SPEECH_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "speech"


class SpeechFixtures:
    """Reads the committed speech fixtures and their manifest."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.manifest: dict[str, dict[str, object]] = json.loads(
            (directory / "manifest.json").read_text(encoding="utf-8")
        )

    def text(self, name: str) -> str:
        """What the fixture says."""
        return str(self.manifest[name]["text"])

    def load(self, name: str) -> tuple[np.ndarray, int]:
        """Return a fixture's int16 samples and sample rate."""
        with wave.open(str(self.directory / name), "rb") as wav:
            assert wav.getnchannels() == 1 and wav.getsampwidth() == 2
            return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2"), wav.getframerate()

    @staticmethod
    def voiced_bounds(samples: np.ndarray, rate: int, floor: float = 0.05) -> tuple[int, int]:
        """First and last sample of the 10 ms frames louder than `floor` x the loudest frame:
        ground truth for where speech begins and ends in a clean synthetic fixture."""
        frame = rate // 100
        count = samples.shape[0] // frame
        frames = samples[: count * frame].astype(np.float64).reshape(count, frame)
        rms = np.sqrt((frames**2).mean(axis=1))
        loud = np.flatnonzero(rms > floor * rms.max())
        return int(loud[0] * frame), int((loud[-1] + 1) * frame)


@pytest.fixture(scope="session")
def speech() -> SpeechFixtures:
    """The speech fixtures."""
    return SpeechFixtures(SPEECH_DIR)
