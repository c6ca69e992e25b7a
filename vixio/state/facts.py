"""Facts: what vixio remembers about the people a device talks with, one statement at a time.

    fact = Fact("aa:bb:cc:dd:ee:ff", "", "like:green tea", "like", "green tea", at=said_at)
    await store.put_facts(device, [fact], drop=[("", "dislike:green tea")])   # one write: merged
    await store.facts(device)                        # the device's facts, every person's
    await store.delete_facts(device, [("", "like:green tea")])                # erased from the files

A fact is owned by a device and a person on it: `person` is "" for the device's household (every
voice); speaker identification keys a person's own facts by its id. Within an owner a fact's
`key` is unique: putting the same key again updates it (a new value, a new time), never adds a
second copy. The key says what may coexist: one name, one home, one birthday per person; any
number of likes, dislikes, family members and notes, each keyed by its value.

The store keeps facts (SQLite table `facts`, Redis hash `P facts:DEVICE`); merging, what the
rules extract and what goes into the instructions are vixio/state/fact_merge.py and
vixio/state/fact_rules.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FactKind = Literal["name", "home", "birthday", "family", "like", "dislike", "date", "note"]
KINDS: tuple[FactKind, ...] = ("name", "home", "birthday", "family", "like", "dislike", "date", "note")
"""Every kind, in the order the instructions carry them when the budget is short (identity first)."""
SINGLE: frozenset[str] = frozenset({"name", "home", "birthday"})
"""Kinds a person has one of: a new one replaces the old (the key is the kind alone)."""

MAX_VALUE_CHARS = 120
"""Longest fact value kept (a note is a clause; a name a few words)."""
MAX_FACTS_PER_DEVICE = 200
"""Facts kept per device over all its persons; past it the least recently said non-identity ones go."""
MAX_PERSON_CHARS = 64


@dataclass(frozen=True, slots=True)
class Fact:
    """One thing remembered about a person on a device."""

    device_id: str
    person: str
    """"" for the device's household; a speaker's id when speaker identification knows who said it."""
    key: str
    """Unique per (device, person): the kind for `SINGLE` kinds, else kind:detail:value in lower case."""
    kind: FactKind
    value: str
    """What is known: "Alice", "green tea", "sister Mary", "Beijing", "March 3"."""
    at: float
    """Unix time it was said (the turn's start): the source time."""
    source: str = "rules"
    """Who learnt it: "rules", "model" or "operator"."""

    @property
    def owner(self) -> tuple[str, str]:
        return self.person, self.key


FactKey = tuple[str, str]
"""(person, key): a fact within its device."""


class FactStore(ABC):
    """The store's facts (vixio/state/store.py `Store` inherits these)."""

    @abstractmethod
    async def facts(self, device_id: str, person: str | None = None) -> list[Fact]:
        """The device's facts (of one person, or every person's with None), oldest said first."""

    @abstractmethod
    async def put_facts(self, device_id: str, facts: Sequence[Fact], drop: Sequence[FactKey] = ()) -> None:
        """Add or update `facts` (same person and key: replaced) and delete `drop`, in one write."""

    @abstractmethod
    async def delete_facts(self, device_id: str, keys: Sequence[FactKey]) -> int:
        """Delete these facts so that their words are in no file of the store; how many there were."""

    @abstractmethod
    async def forget_facts(self, device_id: str, person: str | None = None) -> int:
        """Delete the device's facts (one person's, or all with None), as `delete_facts`; how many."""
