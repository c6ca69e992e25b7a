"""InterruptionArbiter: pause at speech over the reply, then a real interruption or a resume."""

from __future__ import annotations

import pytest

from vixio.stations.interruption import InterruptionArbiter, is_interrupting

pytestmark = pytest.mark.unit


def test_speech_over_the_reply_pauses_and_long_speech_interrupts() -> None:
    arb = InterruptionArbiter(confirm_ms=600)
    assert arb.speech_started(now=10.3, onset=10.0, bot_speaking=True) == "pause"
    assert arb.tick(10.4, speaking=True) is None
    assert arb.tick(10.6, speaking=True) == "interrupt"
    assert arb.counts.real == 1 and arb.counts.false == 0 and not arb.paused


def test_no_pause_when_the_assistant_is_silent_or_already_paused() -> None:
    arb = InterruptionArbiter()
    assert arb.speech_started(1.0, 0.8, bot_speaking=False) is None
    assert arb.speech_started(2.0, 1.8, bot_speaking=True) == "pause"
    assert arb.speech_started(2.1, 2.0, bot_speaking=True) is None


@pytest.mark.parametrize("text", ["", "uh-huh", "Yeah.", "ok", "嗯", "mm hmm"])
def test_a_short_backchannel_or_cough_resumes(text: str) -> None:
    arb = InterruptionArbiter(wait_for_transcript=True)
    arb.speech_started(5.25, 5.0, bot_speaking=True)
    assert arb.speech_ended(5.4) is None  # short: waits for its words
    assert arb.transcript(text) == "resume"
    assert arb.counts.false == 1


@pytest.mark.parametrize("text", ["Stop.", "wait", "what time is it", "停", "别说了"])
def test_a_short_command_or_question_interrupts(text: str) -> None:
    arb = InterruptionArbiter(wait_for_transcript=True)
    arb.speech_started(5.25, 5.0, bot_speaking=True)
    arb.speech_ended(5.45)
    assert arb.transcript(text) == "interrupt"


def test_no_verdict_resumes_after_the_timeout() -> None:
    arb = InterruptionArbiter(resume_after_ms=1500, wait_for_transcript=True)
    arb.speech_started(3.0, 2.75, bot_speaking=True)
    arb.speech_ended(3.2)
    assert arb.tick(4.0, speaking=False) is None
    assert arb.tick(4.5, speaking=False) == "resume"
    assert arb.transcript("stop") is None  # too late: the reply already resumed


def test_speech_that_ends_after_confirm_interrupts_at_its_end() -> None:
    arb = InterruptionArbiter(confirm_ms=600)
    arb.speech_started(1.25, 1.0, bot_speaking=True)
    assert arb.speech_ended(1.7) == "interrupt"


def test_is_interrupting_counts_real_words() -> None:
    assert not is_interrupting("yeah okay")
    assert is_interrupting("tell me more")
    assert is_interrupting("okay no")


def test_without_transcripts_short_speech_resumes_at_its_end() -> None:
    arb = InterruptionArbiter(confirm_ms=600)
    arb.speech_started(2.25, 2.0, bot_speaking=True)
    assert arb.tick(2.4, speaking=True) is None
    assert arb.speech_ended(2.5) == "resume"
    assert arb.counts.false == 1 and not arb.paused
