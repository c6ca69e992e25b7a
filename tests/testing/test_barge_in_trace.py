"""A traced barge-in trial (`Harness(trace=True)`) records every frame without changing a verdict,
and a question the canceller dimmed below the VAD is sorted as `no start`."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.models

pytest.importorskip("pywebrtc_audio", reason="needs vixio[aec]")

SESSION = range(30, 34)
"""One board's first four replies (seeded); the fourth has a question AEC3 dims below Silero."""


def _session(trace: bool) -> list:
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD
    from vixio.testing.barge_in import Harness, Voices

    harness = Harness(
        SileroOnnxVAD(16000), Voices.from_fixtures(), aec=True, arbiter=True, board_stops=True, trace=trace
    )
    return [harness.trial(i, barge_in=i % 2 == 1) for i in SESSION]


def test_the_trace_changes_no_verdict_and_sorts_a_dimmed_question_as_no_start() -> None:
    from vixio.testing.barge_in_misses import why_missed

    traced, plain = _session(trace=True), _session(trace=False)
    for a, b in zip(traced, plain):
        assert (a.false_events, a.false_cancels, a.stopped_s, a.confirmed, a.erle_db) == (
            b.false_events,
            b.false_cancels,
            b.stopped_s,
            b.confirmed,
            b.erle_db,
        )
        assert not b.frames and len(a.frames) > 100  # every 60 ms frame of a 6-9 s reply and its tail
    question = traced[-1]
    miss = why_missed(question)
    assert miss is not None and miss.cause == "no start", miss
    assert miss.dimmed_db > 3.0 and miss.user_over_echo_db < 3.0, miss
    onset = int(question.onset_s * 16000) // 960
    assert not any(a for f in question.frames[onset:] for a in f.actions)  # the reply was never paused
    assert all(f.stamp for f in question.frames[onset : onset + 10])  # the board went on playing
