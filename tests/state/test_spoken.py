"""The spoken memory requests (vixio/state/spoken.py) on the labelled phrasings of
tests/state/spoken_phrasings.py: the rules were written against DEV; HELD_OUT was written after.
HELD_OUT's first run, before any change: misfire 0 of 16, miss 1 of 17 ("请把我说过的话都忘掉":
the "把 ... 忘掉" order); that pattern was added afterwards, so both halves now pass whole.
Prints the misfire rate (a non-request taken for one, or a narrower request taken for "forget
everything") and the miss rate (a request not understood as what it is), for each half."""

from __future__ import annotations

import pytest

from vixio.state.fact_forget import facts_named
from vixio.state.facts import Fact
from vixio.state.spoken import understand

from .spoken_phrasings import DEV, HELD_OUT

pytestmark = pytest.mark.unit

Phrasing = tuple[str, str | None, str]


def rates(phrasings: tuple[Phrasing, ...]) -> tuple[float, float, list[str]]:
    """(misfire rate over the phrasings that are not requests or not "all", miss rate over the
    requests, what went wrong)."""
    misfires = misses = 0
    could_misfire = sum(1 for _, label, _ in phrasings if label != "all")
    requests = sum(1 for _, label, _ in phrasings if label is not None)
    wrong = []
    for text, label, _ in phrasings:
        request = understand(text)
        got = request.kind if request is not None else None
        if got == label:
            continue
        wrong.append(f"{text!r}: {label} -> {got}")
        if label is None or got == "all":
            misfires += 1
        else:
            misses += 1
    return misfires / could_misfire, misses / requests, wrong


@pytest.mark.parametrize("name", ["DEV", "HELD_OUT"])
def test_misfire_and_miss_rates(name: str) -> None:
    phrasings = DEV if name == "DEV" else HELD_OUT
    misfire, miss, wrong = rates(phrasings)
    print(f"\n{name}: {len(phrasings)} phrasings, misfire {misfire:.1%}, miss {miss:.1%}; wrong: {wrong}")
    assert misfire == 0.0, wrong  # a misfire can erase: none is tolerated on either half
    assert miss <= (0.0 if name == "DEV" else 0.1), wrong
    assert len(DEV) + len(HELD_OUT) >= 40


def test_negations_never_erase() -> None:
    for text in (
        "please don't forget what I told you",
        "不要忘记我说的话",
        "do not delete my memory",
        "never forget my name",
        "别删我的记忆",
        "不用忘掉我说的话",
        "you won't forget me, right?",
    ):
        assert understand(text) is None, text


def test_a_request_names_the_facts_it_is_about() -> None:
    def fact(kind: str, value: str) -> Fact:
        return Fact("d", "", f"{kind}:{value}", kind, value, 0.0)  # type: ignore[arg-type]

    facts = [
        fact("name", "Alice"),
        fact("like", "green tea"),
        fact("like", "coffee"),
        fact("birthday", "March 3"),
        fact("family", "sister Mary"),
        fact("like", "绿茶"),
    ]
    for text, expected in (
        ("forget that I like green tea", ["green tea"]),
        ("Please forget my birthday.", ["March 3"]),
        ("forget about my sister", ["sister Mary"]),
        ("忘掉我喜欢绿茶", ["绿茶"]),
        ("forget that I like tea", ["green tea"]),
        ("forget my name", ["Alice"]),
    ):
        request = understand(text)
        assert request is not None and request.kind == "fact", text
        assert [f.value for f in facts_named(facts, request.topic)] == expected, text
