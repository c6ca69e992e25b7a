"""Merging what was just said into what is known, and choosing what the instructions carry.

    puts, drops = merge(known, extract(text), device, person="", at=said_at, source="rules")
    note = facts_note(known, budget=600, query="what should I drink")

Merge: a fact with the same key is updated (new value, new source time), never appended; a
single-valued kind (name, home, birthday) replaces the old one; a like drops the matching
dislike and the other way round; a retraction ("coffee now, not tea") drops every like whose
words contain the retracted ones ("green tea" goes with "tea"). Past `MAX_FACTS_PER_DEVICE`
the least recently said facts go, identity (names) last.

The note: identity first (name, home, birthday, family), then the rest by relevance to what the
user just said (shared words; shared characters for Chinese), then by how recently each was
said, until `budget` characters. So a household's 100th like does not push out its name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from vixio.state.fact_rules import Finding
from vixio.state.facts import (
    MAX_FACTS_PER_DEVICE,
    MAX_VALUE_CHARS,
    SINGLE,
    Fact,
    FactKey,
)

IDENTITY = ("name", "home", "birthday", "family")
"""Kinds always carried first, whatever was asked."""
LABELS = {
    "name": "Name",
    "home": "Lives in",
    "birthday": "Birthday",
    "family": "Family",
    "like": "Likes",
    "dislike": "Dislikes",
    "date": "Date",
    "note": "Asked to remember",
}
_WORDS = re.compile(r"[a-z0-9']+|[\u4e00-\u9fff]")
_STOP = {
    "i",
    "my",
    "me",
    "the",
    "a",
    "an",
    "and",
    "of",
    "to",
    "is",
    "it",
    "you",
    "what",
    "do",
    "that",
    "about",
    "like",
    "likes",
    "love",
    "loves",
    "your",
    "in",
    "on",
    "for",
    "with",
    "am",
    "are",
    "was",
    "called",
    "named",
    "anymore",
    "please",
    "我",
    "你",
    "的",
    "了",
    "是",
    "喜",
    "欢",
    "在",
    "这",
    "那",
    "个",
    "件",
    "事",
    "说",
    "过",
    "吧",
    "呢",
    "啊",
    "请",
}


def key_of(finding: Finding) -> str:
    """The key a finding is merged under (see vixio/state/facts.py `Fact.key`)."""
    if finding.kind in SINGLE:
        return finding.kind
    if finding.kind == "date" or finding.detail.startswith(("favourite", "最喜欢")):
        return f"{finding.kind}:{finding.detail.lower()}"
    return f"{finding.kind}:{' '.join(finding.value.lower().split())}"


def words(text: str) -> set[str]:
    """The words of `text` that say something (single characters for Chinese)."""
    return {w for w in _WORDS.findall(text.lower()) if w not in _STOP}


def matches(fact: Fact, topic: str) -> bool:
    """Whether `topic` ("tea", "green tea", "绿茶") names this fact: all of the topic's words are in
    the fact's value, or all of the value's words are in the topic."""
    value, asked = words(fact.value), words(topic)
    return bool(value and asked) and (asked <= value or value <= asked)


def merge(
    known: Sequence[Fact], findings: Sequence[Finding], device_id: str, *, person: str = "", at: float, source: str
) -> tuple[list[Fact], list[FactKey]]:
    """The facts to put and the (person, key)s to drop so that `known` takes `findings` in."""
    mine = {f.key: f for f in known if f.person == person}
    puts: dict[str, Fact] = {}
    drops: dict[str, None] = {}
    for finding in findings:
        value = " ".join(finding.value.split())[:MAX_VALUE_CHARS]
        if not value:
            continue
        if finding.retract:
            gone = [key for key, fact in {**mine, **puts}.items() if fact.kind == finding.kind and matches(fact, value)]
            for key in gone:
                drops[key] = None
                puts.pop(key, None)
                mine.pop(key, None)
            continue
        key = key_of(finding)
        opposite = {"like": "dislike", "dislike": "like"}.get(finding.kind)
        if opposite is not None:
            for other, fact in list({**mine, **puts}.items()):
                if fact.kind == opposite and matches(fact, value):
                    drops[other] = None
                    puts.pop(other, None)
                    mine.pop(other, None)
        current = mine.get(key)
        if current is not None and current.value == value:
            continue  # said again: kept as first said
        puts[key] = Fact(device_id, person, key, finding.kind, value, at, source)
        drops.pop(key, None)
    dropped: list[FactKey] = [(person, key) for key in drops]
    total = len(known) - len(drops) + sum(1 for key in puts if key not in mine)
    if total > MAX_FACTS_PER_DEVICE:  # the least recently said go first; names, homes, family last
        fresh = {(person, key) for key in puts} | set(dropped)
        old = sorted((f for f in known if f.owner not in fresh), key=lambda f: (f.kind in IDENTITY, f.at))
        dropped += [f.owner for f in old[: total - MAX_FACTS_PER_DEVICE]]
    return list(puts.values()), dropped


def apply(known: Sequence[Fact], puts: Sequence[Fact], drops: Sequence[FactKey]) -> list[Fact]:
    """`known` after a merge's puts and drops (what the store holds once they are written)."""
    gone = set(drops) | {f.owner for f in puts}
    return [*(f for f in known if f.owner not in gone), *puts]


def rank(facts: Sequence[Fact], query: str = "") -> list[Fact]:
    """Identity first, then by relevance to `query`, then the most recently said first."""
    asked = words(query)

    def order(fact: Fact) -> tuple[int, int, float]:
        identity = fact.kind in IDENTITY
        shared = len(asked & words(fact.value)) if asked else 0
        return (0 if identity else 1, IDENTITY.index(fact.kind) if identity else -shared, -fact.at)

    return sorted(facts, key=order)


def facts_note(facts: Sequence[Fact], budget: int, query: str = "") -> str:
    """The facts the instructions carry (under vixio/memory/long_term.py `MEMORY_NOTE`): ranked
    (`rank`), whole lines, at most `budget` characters."""
    if not facts:
        return ""
    lines: list[str] = []
    size = 0
    people = len({f.person for f in facts}) > 1
    for fact in rank(facts, query):
        said = datetime.fromtimestamp(fact.at).strftime("%Y-%m-%d") if fact.at else "?"
        who = f"{fact.person or 'household'}: " if people else ""
        line = f"- {who}{LABELS.get(fact.kind, fact.kind)}: {fact.value} ({said})"
        if size + len(line) + 1 > budget:
            continue  # a shorter one further down may still fit
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def spoken(facts: Sequence[Fact], language: str, most: int = 8) -> str:
    """What the device says to "what do you remember about me" (the first `most`, identity first)."""
    chosen = rank(facts)[:most]
    if not chosen:
        return "我还不记得关于你的任何事。" if language == "zh" else "I don't remember anything about you yet."
    if language == "zh":
        said = {
            "name": "你叫{}",
            "home": "你住在{}",
            "birthday": "你的生日是{}",
            "family": "你的家人：{}",
            "like": "你喜欢{}",
            "dislike": "你不喜欢{}",
            "date": "{}",
            "note": "你让我记住：{}",
        }
        return "我记得：" + "；".join(said[f.kind].format(f.value) for f in chosen) + "。"
    said = {
        "name": "your name is {}",
        "home": "you live in {}",
        "birthday": "your birthday is {}",
        "family": "your {}",
        "like": "you like {}",
        "dislike": "you don't like {}",
        "date": "your {}",
        "note": "you asked me to remember that {}",
    }
    return "I remember that " + "; ".join(said[f.kind].format(f.value) for f in chosen) + "."
