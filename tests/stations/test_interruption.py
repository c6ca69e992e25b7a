"""InterruptionArbiter: pause at speech over the reply, then a real interruption or a resume,
by length alone or by the held speech's words (WordRules)."""

from __future__ import annotations

import pytest

from vixio.config.pipeline import VADConfig
from vixio.stations.barge_in_words import WordRules
from vixio.stations.interruption import InterruptionArbiter, interruption_arbiter

pytestmark = pytest.mark.unit

PLAYING = "The weather today is sunny and warm, with a light breeze from the west."


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


def test_speech_that_ends_after_confirm_interrupts_at_its_end() -> None:
    arb = InterruptionArbiter(confirm_ms=600)
    arb.speech_started(1.25, 1.0, bot_speaking=True)
    assert arb.speech_ended(1.7) == "interrupt"


def test_without_words_short_speech_resumes_at_its_end() -> None:
    arb = InterruptionArbiter(confirm_ms=600)
    arb.speech_started(2.25, 2.0, bot_speaking=True)
    assert arb.tick(2.4, speaking=True) is None
    assert arb.speech_ended(2.5) == "resume"
    assert arb.counts.false == 1 and not arb.paused


def _held(arb: InterruptionArbiter) -> None:
    assert arb.speech_started(5.3, 5.0, bot_speaking=True) == "pause"
    assert arb.listening


@pytest.mark.parametrize(
    "text", ["Stop.", "Wait!", "hold on", "停", "等一下", "别说了", "What time is it?", "现在几点了"]
)
def test_a_command_or_a_new_question_interrupts_before_confirm(text: str) -> None:
    arb = InterruptionArbiter(confirm_ms=600, words=WordRules())
    _held(arb)
    assert arb.tick(5.4, speaking=True) is None
    assert arb.heard(text, PLAYING) == "interrupt"  # 0.4 s after onset: the length rule would still wait
    assert arb.counts.real == 1


@pytest.mark.parametrize("text", ["Uh-huh.", "Okay.", "Mm-hmm.", "Yeah, yeah.", "嗯", "好的", "对对"])
def test_a_backchannel_resumes_even_past_confirm(text: str) -> None:
    arb = InterruptionArbiter(confirm_ms=600, max_hold_ms=1500, words=WordRules())
    _held(arb)
    assert arb.heard(text, PLAYING) is None  # a partial: more may follow
    assert arb.tick(5.9, speaking=True) is None  # past confirm_ms: words say it is not a barge-in
    assert arb.speech_ended(6.2, end=5.8) is None  # waits for the final transcript
    assert arb.heard(text, PLAYING, final=True) == "resume"
    assert arb.counts.false == 1 and arb.counts.real == 0


@pytest.mark.parametrize("text", ["", "Thank you.", "you"])
def test_no_words_leaves_it_to_the_length(text: str) -> None:
    """A user the canceller dimmed transcribes as nothing or Whisper's noise phrase: speech that
    lasted confirm_ms is a barge-in, as without words; a short cough still resumes."""
    arb = InterruptionArbiter(confirm_ms=600, max_hold_ms=1500, words=WordRules())
    _held(arb)
    assert arb.heard(text, PLAYING) is None
    assert arb.tick(5.9, speaking=True) is None  # before max_hold_ms only words interrupt
    assert arb.speech_ended(6.2, end=5.8) is None
    assert arb.heard(text, PLAYING, final=True) == "interrupt"  # 0.8 s of speech
    arb = InterruptionArbiter(confirm_ms=600, max_hold_ms=1500, words=WordRules())
    _held(arb)
    assert arb.speech_ended(5.7, end=5.4) is None
    assert arb.heard(text, PLAYING, final=True) == "resume"  # 0.4 s: a cough
    assert arb.counts.false == 1


def test_the_reply_s_own_echo_resumes_at_once() -> None:
    arb = InterruptionArbiter(confirm_ms=600, words=WordRules())
    _held(arb)
    assert arb.heard("the weather today is sunny", PLAYING) == "resume"
    arb = InterruptionArbiter(confirm_ms=600, words=WordRules())
    _held(arb)
    assert arb.heard("今天天气很好", "今天天气很好，气温二十五度。") == "resume"


def test_a_backchannel_that_goes_on_past_the_cap_interrupts() -> None:
    arb = InterruptionArbiter(confirm_ms=600, max_hold_ms=1500, words=WordRules())
    _held(arb)
    arb.heard("Okay.", PLAYING)
    assert arb.tick(6.4, speaking=True) is None
    assert arb.tick(6.5, speaking=True) == "interrupt"


def test_one_unknown_word_or_no_transcript_waits_for_more_then_falls_back_to_length() -> None:
    arb = InterruptionArbiter(confirm_ms=600, max_hold_ms=1500, words=WordRules())
    _held(arb)
    assert arb.heard("What", PLAYING) is None
    assert arb.tick(5.7, speaking=True) is None  # past confirm_ms: the next transcript may say more
    assert arb.speech_ended(6.3, end=5.8) is None
    assert arb.heard("What", PLAYING, final=True) == "interrupt"  # 0.8 s of speech: by length
    arb = InterruptionArbiter(confirm_ms=600, words=WordRules())
    _held(arb)
    arb.speech_ended(5.9, end=5.4)
    assert arb.heard(None, PLAYING, final=True) == "resume"  # the ASR failed: 0.4 s is short


def test_a_cut_last_word_of_a_partial_does_not_make_it_new() -> None:
    rules = WordRules()
    assert rules.classify("That's it.", final=False) == "unsure"  # Whisper on "Sto-"
    assert rules.classify("That's it.") == "new"
    assert rules.classify("What is the weather", final=False) == "new"


def test_a_transcript_that_never_comes_is_decided_after_the_speech_ends() -> None:
    arb = InterruptionArbiter(confirm_ms=600, resume_after_ms=1500, words=WordRules())
    _held(arb)
    arb.heard("Okay.", PLAYING)
    arb.speech_ended(6.3, end=5.8)  # 0.8 s: past confirm_ms by length
    assert arb.tick(7.7, speaking=False) is None
    assert arb.tick(7.8, speaking=False) == "resume"  # its words so far were a backchannel
    assert arb.heard("stop", PLAYING) is None  # too late: the reply already resumed


def test_more_speech_while_the_final_transcript_is_awaited_goes_on_being_held() -> None:
    arb = InterruptionArbiter(confirm_ms=600, words=WordRules())
    _held(arb)
    arb.speech_ended(6.0, end=5.5)
    arb.speech_continued()
    assert not arb.ended
    assert arb.heard("okay", PLAYING, final=True) is None  # no longer the final one: speech goes on


@pytest.mark.parametrize(
    ("text", "playing", "verdict"),
    [
        ("What is the weather today?", PLAYING, "new"),  # shares words with the reply, not its sentence
        ("sunny and warm with a light breeze", PLAYING, "echo"),
        ("in MMM.", "", "unsure"),
        ("Okay, uh-huh.", "", "backchannel"),
        ("stop", "Press stop to end the timer.", "command"),
        ("今天天气", "今天天气很好。", "echo"),
        ("给我讲个笑话", "今天天气很好。", "new"),
    ],
)
def test_word_rules(text: str, playing: str, verdict: str) -> None:
    assert WordRules().classify(text, playing) == verdict


def test_the_config_keys_build_the_arbiter() -> None:
    arb = interruption_arbiter(VADConfig(barge_in_commands=["halt"], barge_in_backchannels=["aye"]))
    assert arb.words is not None
    assert arb.words.classify("halt") == "command" and arb.words.classify("stop now") == "new"
    assert arb.words.classify("aye") == "backchannel"
    assert interruption_arbiter(VADConfig(barge_in_words=False)).words is None


def test_a_gap_between_words_does_not_resume_a_question_whose_transcript_is_late() -> None:
    """Under load the first transcript can come after `resume_after_ms`: a gap between the
    question's words (unvoiced, but no VAD end) must not resume the reply (seen in the e2e
    barge-in test with 4 test workers); the speech going on past `max_hold_ms` interrupts."""
    arb = InterruptionArbiter(confirm_ms=600, max_hold_ms=2000, resume_after_ms=1500, words=WordRules())
    _held(arb)  # onset 5.0, paused at 5.3
    assert arb.tick(6.9, speaking=False) is None  # 1.6 s after the pause, between two words
    assert arb.tick(7.1, speaking=True) == "interrupt"  # still speaking at max_hold_ms
    assert arb.counts.real == 1 and arb.counts.false == 0
