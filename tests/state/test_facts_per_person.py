"""Two people on one device: what each says is theirs, and each is sent their own facts and the
household's, never the other's (the learner follows the session's recognised speaker)."""

from __future__ import annotations

import time

import pytest

from vixio.state.fact_learner import FactLearner
from vixio.state.store import Store

pytestmark = pytest.mark.integration


async def test_each_speaker_gets_their_own_facts_and_the_households(store: Store) -> None:
    speaking = ["alice"]
    learner = FactLearner(store, "aa:bb:cc:00:45:01", [])
    learner.person_source = lambda: speaking[0]
    learner.heard("c1", 0, "My name is Alice and I like green tea.", time.time())
    speaking[0] = "bob"
    learner.heard("c1", 1, "I like black coffee.", time.time())
    speaking[0] = ""  # a voice nobody enrolled: the household
    learner.heard("c1", 2, "We live in Lisbon.", time.time())
    await learner.finish()

    stored = {(f.person, f.value.lower()) for f in await store.facts("aa:bb:cc:00:45:01")}
    assert {("alice", "green tea"), ("bob", "black coffee"), ("", "lisbon")} <= stored
    assert ("alice", "alice") in stored  # her name is hers, not the household's

    speaking[0] = "alice"
    alice = learner.note("what should I drink", 600).lower()
    assert "green tea" in alice and "lisbon" in alice and "coffee" not in alice
    speaking[0] = "bob"
    bob = learner.note("what should I drink", 600).lower()
    assert "black coffee" in bob and "lisbon" in bob and "green tea" not in bob and "alice" not in bob
    speaking[0] = ""
    household = learner.note("what should I drink", 600).lower()
    assert "lisbon" in household and "tea" not in household and "coffee" not in household
