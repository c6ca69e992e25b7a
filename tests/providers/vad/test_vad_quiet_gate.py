"""The quiet gate (`vad.quiet_below_dbfs`): idle audio quieter than the level goes unscored, and
nothing else changes: scripted streams for the rules, real Silero on the speech fixtures for the
events, and a firmware-like device in a quiet room through `vixio serve --workers 2`."""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np
import pytest

from vixio.providers.vad import VADStream, VoiceActivityDetector
from vixio.providers.vad.detector import QuietGate

pytestmark = pytest.mark.unit

RATE, WINDOW = 16000, 512
SPEECH = Path(__file__).resolve().parents[2] / "fixtures" / "speech"


class CountingStream(VADStream):
    """Scores by a script (one probability per window, in order) and counts what it was asked."""

    def __init__(self, probabilities: list[float]) -> None:
        self.sample_rate, self.window_samples = RATE, WINDOW
        self.script = list(probabilities)
        self.scored = 0

    def probability(self, window: np.ndarray) -> float:
        self.scored += 1
        return self.script.pop(0) if self.script else 0.0

    def reset(self) -> None:
        pass


def noise(windows: int, dbfs: float, seed: int = 0) -> np.ndarray:
    """Gaussian noise of `windows` windows at `dbfs` (RMS), int16."""
    rms = 32768 * 10 ** (dbfs / 20)
    return np.clip(np.random.default_rng(seed).normal(0, rms, windows * WINDOW), -32768, 32767).astype(np.int16)


def feed_frames(detector: VoiceActivityDetector, pcm: np.ndarray, frame: int = 960) -> list[tuple[str, int]]:
    """Feed 60 ms frames (960 samples: not a whole number of windows) as a device sends them."""
    events = []
    for at in range(0, pcm.size, frame):
        events += [(e.type, e.sample) for e in detector.feed(pcm[at : at + frame])]
    return events


def test_quiet_audio_goes_unscored_once_the_model_has_heard_silence() -> None:
    stream = CountingStream([])
    detector = VoiceActivityDetector(stream, quiet_below_dbfs=-60)
    assert detector.feed(noise(QuietGate.SETTLE, -70)) == []
    assert stream.scored == QuietGate.SETTLE  # the model hears silence first
    assert feed_frames(detector, noise(300, -70, seed=1)) == []
    assert stream.scored == QuietGate.SETTLE  # then ~10 s of a quiet room cost it nothing
    assert detector.gate is not None and detector.gate.skipped == 300


def test_audio_at_the_level_or_louder_is_scored() -> None:
    stream = CountingStream([])
    detector = VoiceActivityDetector(stream, quiet_below_dbfs=-60)
    detector.feed(noise(2 * QuietGate.SETTLE, -70))
    before = stream.scored
    detector.feed(noise(40, -55, seed=2))  # the capacity benchmark's background: above the level
    assert stream.scored == before + 40
    quiet_then_one_loud = np.concatenate([noise(1, -75, seed=3), noise(1, -45, seed=4)])
    detector.feed(quiet_then_one_loud)  # one loud window: the whole piece is scored
    assert stream.scored == before + 42


def test_from_a_candidate_start_to_the_end_everything_is_scored() -> None:
    settle, speech, quiet_inside = QuietGate.SETTLE, [0.9] * 40, [0.05] * 10
    stream = CountingStream([0.0] * settle + speech + quiet_inside + [0.9] * 10 + [0.0] * 40)
    detector = VoiceActivityDetector(stream, min_speech_ms=250, min_silence_ms=500, quiet_below_dbfs=-60)
    pcm = np.concatenate(
        [
            noise(settle, -70),
            noise(40, -30, seed=5),
            noise(10, -75, seed=6),
            noise(10, -30, seed=7),
            noise(40, -75, seed=8),
        ]
    )
    events = [kind for kind, _ in feed_frames(detector, pcm)]
    # The quiet stretch inside the utterance and the silence that ends it are scored: one utterance.
    assert events == ["start", "end"]
    assert stream.scored >= settle + 40 + 10 + 10 + 16  # 500 ms of silence windows scored to the end


def test_anything_the_model_hears_keeps_it_scoring_until_it_settles_again() -> None:
    settle, backoff = QuietGate.SETTLE, QuietGate.BACKOFF
    stream = CountingStream([0.0] * settle + [QuietGate.WAKE] + [0.0] * 100)
    detector = VoiceActivityDetector(stream, quiet_below_dbfs=-60)
    detector.feed(noise(settle, -70))
    detector.feed(noise(1, -40, seed=9))  # something, not speech: the model says WAKE
    scored = []
    for piece in range(max(settle, backoff) + 5):  # then a quiet room, a window at a time
        before = stream.scored
        detector.feed(noise(1, -70, seed=10 + piece))
        scored.append(stream.scored - before)
    # Scored until the model has heard SETTLE calm windows and the loud piece's BACKOFF has
    # passed; skipped from then on.
    wait = max(settle, backoff)
    assert scored == [1] * wait + [0] * 5


def test_a_room_above_the_level_is_measured_on_one_piece_in_nine() -> None:
    detector = VoiceActivityDetector(CountingStream([]), quiet_below_dbfs=-60)
    detector.feed(noise(QuietGate.SETTLE, -70))
    gate = detector.gate
    assert gate is not None
    measured = 0
    for piece in range(90):
        before = gate._loud_for
        detector.feed(noise(2, -55, seed=20 + piece))
        measured += before == 0
    assert measured == 10 and gate.skipped == 0


async def test_the_async_paths_skip_the_scoring_round_trip() -> None:
    stream = CountingStream([])
    detector = VoiceActivityDetector(stream, quiet_below_dbfs=-60)
    await detector.feed_async(noise(QuietGate.SETTLE, -70))
    quiet = noise(4, -70, seed=13).tobytes()
    assert await detector.feed_parts_async([quiet[:1920], quiet[1920:]]) == [[], []]
    assert await detector.feed_async(noise(3, -70, seed=14)) == []
    assert stream.scored == QuietGate.SETTLE and detector.gate is not None and detector.gate.skipped == 7


def test_off_by_default_in_the_detector_and_with_null_in_the_config() -> None:
    from vixio.config import VixioConfig

    assert VoiceActivityDetector(CountingStream([])).gate is None
    assert VixioConfig.model_validate({}).vad.quiet_below_dbfs == -60.0
    assert VixioConfig.model_validate({"vad": {"quiet_below_dbfs": None}}).vad.quiet_below_dbfs is None
    with pytest.raises(ValueError, match="dBFS"):
        QuietGate(5)


# --- real Silero on the speech fixtures -------------------------------------------------------------


def _fixture(name: str) -> np.ndarray:
    with wave.open(str(SPEECH / f"{name}.wav")) as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), "<i2").astype(np.float64)


def _room(speech: np.ndarray, speech_dbfs: float, background_dbfs: float | None, seed: int) -> np.ndarray:
    """2 s of the room, the utterance at `speech_dbfs` (RMS of its voiced part), 1.5 s of the room."""
    voiced = speech[np.abs(speech) > 300]
    gain = 10 ** (speech_dbfs / 20) * 32768 / math.sqrt(float(np.mean(voiced**2)))
    audio = np.concatenate([np.zeros(2 * RATE), speech * gain, np.zeros(3 * RATE // 2)])
    if background_dbfs is not None:
        audio += np.random.default_rng(seed).normal(0, 32768 * 10 ** (background_dbfs / 20), audio.size)
    return np.clip(audio, -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("name", ["timer", "volume", "weather", "story"])
def test_every_utterance_is_found_where_it_was_in_quiet_rooms_and_nothing_changes_in_noise(name: str) -> None:
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD

    vad, speech = SileroOnnxVAD(), _fixture(name)
    settings = dict(min_silence_ms=500, early_silence_ms=150, speech_pad_ms=100)
    for seed, (speech_dbfs, background) in enumerate(
        [(-30, -75), (-45, -75), (-60, -75), (-30, None), (-60, None), (-30, -55), (-45, -55)]
    ):
        pcm = _room(speech, speech_dbfs, background, seed)
        plain = feed_frames(VoiceActivityDetector(vad.create_stream(), **settings), pcm)
        gated_detector = VoiceActivityDetector(vad.create_stream(), quiet_below_dbfs=-60, **settings)
        gated = feed_frames(gated_detector, pcm)
        assert gated_detector.gate is not None
        where = f"{name} at {speech_dbfs} dBFS in {background}"
        if background is not None and background > -60:  # the room is above the level: nothing skipped
            assert gated == plain and gated_detector.gate.skipped == 0, where
            continue
        assert [kind for kind, _ in gated] == [kind for kind, _ in plain], where
        # Starts within the 100 ms pad, ends and pauses within two windows (the model's state
        # differs a little after skipped silence).
        for (kind, at), (_, was) in zip(gated, plain):
            assert abs(at - was) <= (1600 if kind == "start" else 2 * WINDOW), (where, kind, at, was)
        assert gated_detector.gate.skipped >= 2 * RATE // WINDOW * 0.6, where  # most of the 2 s before
