"""Forgetting one fact: the fact, and the stored turns in which the user said it.

    named = facts_named(facts, "that I like green tea")      # what the request names
    facts, turns = await forget_facts(store, device_id, named)

A fact deleted while the turn that said it stays would come back: the next resume puts the turn
in the model's history, and the rules would learn it again. So the user's turns whose words hold
the fact's value go with it (only those: the rest of the conversation stays). Used by the spoken
request (vixio/memory/forget.py), the console and `vixio memory forget-fact`; each delete is an
erase (the SQLite WAL is truncated after it).
"""

from __future__ import annotations

from collections.abc import Sequence

from vixio.state.fact_merge import matches, words
from vixio.state.facts import Fact
from vixio.state.store import Store, StoredTurn

MAX_TURNS_SEARCHED = 10_000
"""Stored turns looked through for the fact's words (a device keeps at most `state.max_turns` on Redis)."""

_KIND_WORDS = {
    "name": ("name", "called", "名字", "叫什么"),
    "birthday": ("birthday", "born", "生日", "出生"),
    "home": ("live", "living", "address", "home", "住", "家在", "地址"),
}
"""Words that name a single-valued kind: "forget my birthday" names the birthday, whatever it is."""


def facts_named(facts: Sequence[Fact], topic: str) -> list[Fact]:
    """The facts `topic` names: by its words (a name only when the topic says "name")."""
    lower = topic.lower()
    asked = words(topic)
    named = []
    for fact in facts:
        by_kind = any(w in asked or (not w.isascii() and w in lower) for w in _KIND_WORDS.get(fact.kind, ()))
        if by_kind or (fact.kind != "name" and matches(fact, topic)):
            named.append(fact)
    return named


def said_in(turn: StoredTurn, fact: Fact) -> bool:
    """Whether the user's words in `turn` hold the fact's value."""
    value = words(fact.value)
    return bool(value) and value <= words(turn.user)


async def forget_facts(store: Store, device_id: str, facts: Sequence[Fact]) -> tuple[int, list[StoredTurn]]:
    """Delete `facts` and the device's turns that said them; (facts deleted, the turns deleted)."""
    if not facts:
        return 0, []
    deleted = await store.delete_facts(device_id, sorted({fact.owner for fact in facts}))
    turns = await store.recent_turns(device_id, MAX_TURNS_SEARCHED)
    sources = [turn for turn in turns if any(said_in(turn, fact) for fact in facts)]
    for turn in sources:
        await store.delete_turn(device_id, turn.conversation, turn.seq)
    return deleted, sources
