"""VoiceActivityDetector rules, driven by a scripted VADStream (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.providers.vad import VADEvent, VADStream, VoiceActivityDetector

pytestmark = pytest.mark.unit

# 1 kHz and 10-sample windows: one window is 10 ms and one sample is 1 ms, so the
# expected offsets below can be read directly as milliseconds.
RATE = 1000
WINDOW = 10


class ScriptedStream(VADStream):
    """Returns scripted probabilities, records every window, fails on a call beyond the script."""

    def __init__(self, probabilities: list[float], *, window: int = WINDOW, rate: int = RATE) -> None:
        self.sample_rate = rate
        self.window_samples = window
        self.script = list(probabilities)
        self.windows: list[np.ndarray] = []
        self.resets = 0

    def probability(self, window: np.ndarray) -> float:
        assert window.dtype == np.float32 and window.shape == (self.window_samples,)
        if not self.script:
            raise AssertionError(f"unexpected window #{len(self.windows) + 1}: script exhausted")
        self.windows.append(window.copy())
        return self.script.pop(0)

    def reset(self) -> None:
        self.resets += 1

    def assert_consumed(self) -> None:
        assert not self.script, f"{len(self.script)} scripted windows were never scored"


def run(probabilities: list[float], **options: float) -> tuple[list[VADEvent], VoiceActivityDetector]:
    stream = ScriptedStream(probabilities)
    detector = VoiceActivityDetector(stream, **options)  # type: ignore[arg-type]
    events = detector.feed(np.zeros(len(probabilities) * WINDOW, dtype=np.int16))
    stream.assert_consumed()
    return events, detector


RULES = {"min_speech_ms": 50, "min_silence_ms": 100, "speech_pad_ms": 20}
S, Q, B = 0.9, 0.05, 0.4  # speech, quiet, borderline (between neg_threshold 0.35 and 0.5)


def test_start_after_min_speech_and_end_after_min_silence() -> None:
    events, detector = run([Q] * 3 + [S] * 12 + [Q] * 10, **RULES)
    # speech from 30 ms: confirmed after 5 windows (at 80 ms), padded back 20 ms;
    # silence from 150 ms: confirmed after 10 windows (at 250 ms), padded forward 20 ms.
    assert [(e.type, e.sample, e.detected_at) for e in events] == [("start", 10, 80), ("end", 170, 250)]
    assert not detector.speaking


def test_speech_shorter_than_min_speech_never_starts() -> None:
    events, detector = run([Q] * 3 + [S] * 4 + [Q] * 5 + [S] * 4 + [Q] * 20, **RULES)
    assert events == []
    assert not detector.speaking


def test_pause_shorter_than_min_silence_does_not_end() -> None:
    events, detector = run([S] * 6 + [Q] * 9 + [S] * 3 + [Q] * 9, **RULES)
    assert [e.type for e in events] == ["start"]
    assert detector.speaking


def test_borderline_windows_neither_start_nor_end() -> None:
    events, _ = run([B] * 30, **RULES)
    assert events == []
    events, detector = run([S] * 6 + [B] * 40, **RULES)
    assert [e.type for e in events] == ["start"]
    assert detector.speaking


def test_borderline_keeps_a_candidate_alive() -> None:
    # Borderline windows neither confirm nor cancel: 2 speech + 2 borderline + 1 speech = 5 windows.
    events, _ = run([S, S, B, B, S] + [Q] * 3, **RULES)
    assert [(e.type, e.detected_at) for e in events] == [("start", 50)]
    # ... and a silence window (< neg_threshold) cancels it.
    events, _ = run([S, S, Q, S, S, S] + [Q] * 3, **RULES)
    assert events == []


def test_explicit_neg_threshold() -> None:
    events, _ = run([S] * 6 + [0.25] * 12, **RULES, neg_threshold=0.2)
    assert [e.type for e in events] == ["start"]
    events, _ = run([S] * 6 + [0.15] * 12, **RULES, neg_threshold=0.2)
    assert [e.type for e in events] == ["start", "end"]


def test_start_padding_clamps_at_zero_and_at_previous_end() -> None:
    events, _ = run([S] * 6 + [Q] * 10 + [S] * 6, **RULES)
    assert [(e.type, e.sample) for e in events] == [("start", 0), ("end", 80), ("start", 140)]
    # A pad longer than the gap: the end is clamped to the audio seen, the next start to that end.
    events, _ = run([S] * 6 + [Q] * 10 + [S] * 6, **{**RULES, "speech_pad_ms": 150})
    assert [(e.type, e.sample) for e in events] == [("start", 0), ("end", 160), ("start", 160)]


def test_flush_ends_open_speech() -> None:
    events, detector = run([S] * 8 + [Q] * 3, **RULES)
    assert [e.type for e in events] == ["start"]
    (end,) = detector.flush()
    assert (end.type, end.sample) == ("end", 100)  # silence began at 80 ms, padded by 20
    assert detector.flush() == []


def test_frames_not_multiple_of_window_carry_the_remainder() -> None:
    # The Xiaozhi case: 960-sample frames, 512-sample windows.
    stream = ScriptedStream([Q] * 100, window=512, rate=16000)
    detector = VoiceActivityDetector(stream)
    ramp = (np.arange(960 * 7) % 30000).astype(np.int16)
    for index in range(7):
        assert detector.feed(ramp[index * 960 : (index + 1) * 960].tobytes()) == []
    assert len(stream.windows) == 960 * 7 // 512 == 13
    scored = np.concatenate(stream.windows)
    np.testing.assert_array_equal(scored, ramp[: 13 * 512].astype(np.float32) / 32768)
    assert detector.samples_fed == 960 * 7


def test_reset_restarts_offsets_and_resets_stream() -> None:
    stream = ScriptedStream([S] * 6 + [S] * 6)
    detector = VoiceActivityDetector(stream, **RULES)
    assert [e.sample for e in detector.feed(np.zeros(65, dtype=np.int16))] == [0]
    detector.reset()
    assert stream.resets == 1 and not detector.speaking and detector.samples_fed == 0
    # The 5 carried samples were dropped: the next window starts at offset 0 again.
    events = detector.feed(np.zeros(60, dtype=np.int16))
    assert [(e.type, e.detected_at) for e in events] == [("start", 50)]


def test_rejects_bad_input_and_options() -> None:
    detector = VoiceActivityDetector(ScriptedStream([]))
    with pytest.raises(ValueError, match="whole int16"):
        detector.feed(b"\x00\x00\x00")
    with pytest.raises(TypeError, match="float32"):
        detector.feed(np.zeros(10, dtype=np.float32))
    with pytest.raises(ValueError, match="neg_threshold"):
        VoiceActivityDetector(ScriptedStream([]), threshold=0.5, neg_threshold=0.6)
    with pytest.raises(ValueError, match="min_silence_ms"):
        VoiceActivityDetector(ScriptedStream([]), min_silence_ms=-1)
    with pytest.raises(ValueError, match="threshold"):
        VoiceActivityDetector(ScriptedStream([]), threshold=0)


async def test_windows_that_may_end_the_speech_are_scored_urgently() -> None:
    # One window per feed: the batching backend hears `urgent` exactly while the speech has
    # gone quiet and its end is not yet decided (the user is waiting for the answer).
    class RecordingStream(ScriptedStream):
        urgent: list[bool] = []

        async def score(self, windows: np.ndarray, *, urgent: bool = False) -> list[float]:
            self.urgent.append(urgent)
            return await super().score(windows)

    script = [Q] * 2 + [S] * 8 + [Q] * 3 + [S] * 2 + [Q] * 12
    stream = RecordingStream(script)
    detector = VoiceActivityDetector(stream, **RULES)  # type: ignore[arg-type]
    events = []
    for _ in script:
        events += await detector.feed_async(np.zeros(WINDOW, dtype=np.int16))
    assert [e.type for e in events] == ["start", "end"]
    # speaking from window 7; quiet windows 10-12 (a pause: 11-13 urgent), speech again at 13-14,
    # quiet from 15: 16-24 urgent, the end decided at window 24.
    quiet_after_speech = [False] * 11 + [True] * 3 + [False] * 2 + [True] * 9 + [False] * 2
    assert stream.urgent == quiet_after_speech


async def test_pieces_fed_together_give_each_piece_the_events_it_would_get_alone() -> None:
    # Pieces of 7, 13, 3, 25, ... samples (never a whole window): one round trip for a run of
    # them gives every piece the same events as feeding them one at a time.
    script = [Q] * 3 + [S] * 12 + [Q] * 12 + [S] * 6 + [Q] * 100
    sizes = [7, 13, 3, 25, 1, 40, 11, 9, 30, 2, 19] * 8
    pcm = np.zeros(sum(sizes), dtype=np.int16).tobytes()
    pieces, at = [], 0
    for size in sizes:
        pieces.append(pcm[2 * at : 2 * (at + size)])
        at += size
    windows = sum(sizes) // WINDOW
    one_by_one = VoiceActivityDetector(ScriptedStream(script[:windows]), **RULES)  # type: ignore[arg-type]
    alone = [await one_by_one.feed_async(piece) for piece in pieces]
    together = VoiceActivityDetector(ScriptedStream(script[:windows]), **RULES)  # type: ignore[arg-type]
    runs = [pieces[i : i + 5] for i in range(0, len(pieces), 5)]
    joined = [events for run in runs for events in await together.feed_parts_async(run)]
    assert joined == alone
    assert sum(len(events) for events in alone) == 4  # two utterances: start and end each
    with pytest.raises(ValueError, match="whole int16 samples"):
        await together.feed_parts_async([b"\x00", b"\x00"])


EARLY = {**RULES, "early_silence_ms": 40}


def test_a_pause_after_early_silence_and_a_resume_when_speech_comes_back() -> None:
    events, detector = run([S] * 10 + [Q] * 6 + [S] * 5 + [Q] * 10, **EARLY)
    # silence from 100 ms: a pause at 140 ms; speech again at 160 ms; the end 100 ms after 210 ms.
    assert [(e.type, e.sample, e.detected_at) for e in events] == [
        ("start", 0, 50),
        ("pause", 100, 140),
        ("resume", 160, 170),
        ("pause", 210, 250),
        ("end", 230, 310),
    ]


def test_no_pauses_when_early_silence_is_not_shorter_than_min_silence() -> None:
    events, _ = run([S] * 10 + [Q] * 10, **{**RULES, "early_silence_ms": 100})
    assert [e.type for e in events] == ["start", "end"]


def test_end_now_ends_at_the_named_pause_only() -> None:
    stream = ScriptedStream([S] * 10 + [Q] * 5 + [S] * 2 + [Q] * 5)
    detector = VoiceActivityDetector(stream, **EARLY)  # type: ignore[arg-type]
    events = detector.feed(np.zeros(150 * 1, dtype=np.int16))
    assert [e.type for e in events] == ["start", "pause"] and detector.silence_start == 100
    events += detector.feed(np.zeros(70, dtype=np.int16))  # resumed, then a second pause at 170
    assert [e.type for e in events] == ["start", "pause", "resume", "pause"]
    assert detector.end_now(100) is None  # that pause is gone
    end = detector.end_now(170)
    assert end is not None and (end.type, end.sample) == ("end", 190) and not detector.speaking


def test_extend_silence_makes_the_end_wait_until_speech_comes_back() -> None:
    stream = ScriptedStream([S] * 10 + [Q] * 15 + [S] * 2 + [Q] * 10)
    detector = VoiceActivityDetector(stream, **EARLY)  # type: ignore[arg-type]
    events = detector.feed(np.zeros(150, dtype=np.int16))
    assert detector.extend_silence(100, 200)
    events += detector.feed(np.zeros(220, dtype=np.int16))
    # 150 ms of silence did not end it (200 needed); after the speech, 100 ms ends it again.
    assert [e.type for e in events] == ["start", "pause", "resume", "pause", "end"]
    assert events[-1].detected_at == 370
