"""Enrolment by voice and "forget my voice", on a real SQLite store, with embeddings made here
(the model's part is tested in tests/providers/speaker/ and tests/state/test_speakers_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vixio.core.session_state import SessionState, SpeakerMatch
from vixio.memory.speakers import ENROL, FORGET, SAY, SpeakerBook, VoiceEnrolment, _says, spoken_name
from vixio.state.sqlite import SqliteStore
from vixio.state.voiceprints import MAX_PEOPLE

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=256).astype(np.float32)
    return vector / np.linalg.norm(vector)


@pytest.fixture
async def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    yield store
    await store.close()


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Remember my voice, I'm Alice.", "Alice"),
        ("remember my voice my name is bob", "Bob"),
        ("Please learn my voice. This is Zoë.", "Zoë"),
        ("记住我的声音，我叫小明。", "小明"),
        ("记住我的声音，我是妈妈", "妈妈"),
        ("Remember my voice.", ""),
        ("记住我的声音", ""),
    ],
)
def test_the_name_is_taken_from_either_language(text: str, name: str) -> None:
    assert _says(text, ENROL)
    assert spoken_name(text) == name


def test_other_sentences_are_not_enrolments_or_forgets() -> None:
    for text in ("I remember my mother's voice", "what is my voice like", "don't forget my keys", "我的声音好听吗"):
        assert not _says(text, ENROL) and not _says(text, FORGET), text
    assert _says("Please forget my voice!", FORGET) and _says("删除我的声纹", FORGET)


async def test_a_spoken_enrolment_collects_three_utterances_then_stores_their_mean(store: SqliteStore) -> None:
    state = SessionState()
    enrolment = VoiceEnrolment(SpeakerBook(store, DEVICE), lambda: state, language="en", utterances=3)
    voice = [unit(1) + 0.1 * unit(k) for k in (2, 3, 4)]
    state.speaker = SpeakerMatch("", 0.1, voice[0])
    assert await enrolment.intercept("Remember my voice, I'm Alice") == SAY["en"]["more"].format(
        name="Alice", left=2, s="s"
    )
    state.speaker = None  # typed text, or too short to embed
    assert await enrolment.intercept("hello") == SAY["en"]["unheard"]
    state.speaker = SpeakerMatch("", 0.1, voice[1])
    assert await enrolment.intercept("the sky is blue") == SAY["en"]["again"].format(left=1)
    assert await store.voiceprints(DEVICE) == []
    state.speaker = SpeakerMatch("", 0.1, voice[2])
    assert await enrolment.intercept("and the grass is green") == SAY["en"]["done"].format(name="Alice")
    (stored,) = await store.voiceprints(DEVICE)
    mean = np.sum(voice, axis=0)
    assert stored.person == "Alice" and stored.samples == 3
    np.testing.assert_allclose(stored.array(), mean / np.linalg.norm(mean), atol=1e-6)
    assert await enrolment.intercept("what time is it") is None  # over: the model answers again


async def test_enrolling_again_adds_to_the_voiceprint_and_cancel_stops(store: SqliteStore) -> None:
    book = SpeakerBook(store, DEVICE)
    await book.enrol("Alice", [unit(1)])
    await book.enrol("alice", [unit(2), unit(3)])  # the same person, whatever the case
    (stored,) = await store.voiceprints(DEVICE)
    assert (stored.person, stored.samples) == ("Alice", 3)
    state = SessionState(speaker=SpeakerMatch("", 0.0, unit(5)))
    enrolment = VoiceEnrolment(book, lambda: state, language="zh", utterances=2)
    assert await enrolment.intercept("记住我的声音，我叫小明") == SAY["zh"]["more"].format(name="小明", left=1, s="")
    assert await enrolment.intercept("算了") == SAY["zh"]["cancelled"]
    assert [p.person for p in await store.voiceprints(DEVICE)] == ["Alice"]


async def test_forget_my_voice_deletes_only_the_recognised_speakers(store: SqliteStore) -> None:
    book = SpeakerBook(store, DEVICE)
    await book.enrol("Alice", [unit(1)])
    await book.enrol("Bob", [unit(2)])
    state = SessionState(speaker=SpeakerMatch("", 0.3, unit(9)))
    enrolment = VoiceEnrolment(book, lambda: state, language="en")
    assert await enrolment.intercept("forget my voice") == SAY["en"]["unknown"]  # a stranger cannot
    state.speaker = SpeakerMatch("Bob", 0.95, unit(2))
    assert await enrolment.intercept("Forget my voice, please.") == SAY["en"]["forgot"].format(name="Bob")
    assert [p.person for p in await store.voiceprints(DEVICE)] == ["Alice"]


async def test_a_device_holds_at_most_max_people(store: SqliteStore) -> None:
    book = SpeakerBook(store, DEVICE)
    for k in range(MAX_PEOPLE):
        await book.enrol(f"Person{k}", [unit(k)])
    with pytest.raises(ValueError, match=str(MAX_PEOPLE)):
        await book.enrol("One too many", [unit(99)])
    state = SessionState(speaker=SpeakerMatch("", 0.0, unit(98)))
    enrolment = VoiceEnrolment(book, lambda: state, language="en")
    assert await enrolment.intercept("remember my voice, I'm Eve") == SAY["en"]["full"].format(limit=MAX_PEOPLE)
    await book.enrol("Person3", [unit(3)])  # someone already known may still add to theirs
