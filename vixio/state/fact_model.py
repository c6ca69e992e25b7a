"""Facts extracted by a cloud model (`memory.long_term: model`), as JSON, checked before they count.

    model = ModelFacts(complete)                      # complete(messages) -> the model's text
    findings = await model.extract(known, ["my name is Alice", "I like green tea"])   # None: failed

The model sees the facts known so far and what the user said (never the assistant's words) and
answers `{"facts": [{"kind", "value", "detail", "retract"}]}`. An answer counts only if it is
that JSON, each kind is one vixio knows, each value is short, and every word of a value was
said by the user (a model that invents "the user likes jazz" from nothing is caught here: that
is the SmolLM2 failure). Anything else is None: the rules (which always run first, per
utterance) are all that is learnt from those turns, and one WARNING says why.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from loguru import logger

from vixio.state.fact_merge import LABELS, words
from vixio.state.fact_rules import Finding
from vixio.state.facts import KINDS, MAX_VALUE_CHARS, Fact

EXTRACT_PROMPT = (
    "You keep a list of lasting facts about the user of a voice assistant. Read what the user said "
    'and answer with JSON only: {"facts": [{"kind": K, "value": V, "detail": D, "retract": false}]}. '
    "K is one of: name, home, birthday, family, like, dislike, date, note. V is short and uses the "
    'user\'s own words (for family: relation and name, e.g. "sister Mary"; for date: the occasion and '
    'the day). D is the relation or occasion, else "". Set retract to true for a fact the user says '
    'no longer holds ("I like coffee now, not tea" gives like coffee and like tea with retract true). '
    'Leave out small talk, questions and one-off requests. Answer {"facts": []} when there is nothing.'
)
EXTRACT_TIMEOUT = 60.0
"""Seconds the model has to answer; then nothing is learnt from the batch but the rules' facts."""
MAX_FINDINGS = 30
"""Facts taken from one answer at most."""
_JSON = re.compile(r"\{.*\}", re.DOTALL)


class ModelFacts:
    """Asks a chat-completions model for the facts in a batch of user utterances."""

    def __init__(
        self, complete: Callable[[list[dict[str, str]]], Awaitable[Any]], timeout: float = EXTRACT_TIMEOUT
    ) -> None:
        self._complete = complete
        self.timeout = timeout

    async def extract(self, known: Sequence[Fact], said: Sequence[str]) -> list[Finding] | None:
        """The checked findings, or None when the model failed or answered something else."""
        known_lines = "\n".join(f"- {LABELS.get(f.kind, f.kind)}: {f.value}" for f in known[-50:]) or "(none)"
        user = "\n".join(f"User: {text}" for text in said)
        messages = [
            {"role": "system", "content": EXTRACT_PROMPT},
            {"role": "user", "content": f"Known facts:\n{known_lines}\n\nWhat the user said:\n{user}"},
        ]
        try:
            answer = str(await asyncio.wait_for(self._complete(messages), self.timeout) or "")
        except Exception as exc:  # noqa: BLE001 - a model failure keeps the rules' facts
            logger.warning(
                "memory: the model did not extract facts ({}: {}); the rules' facts stand",
                type(exc).__name__,
                str(exc)[:200],
            )
            return None
        findings = checked(answer, " ".join(said))
        if findings is None:
            logger.warning(
                "memory: the model's facts were not valid JSON grounded in what was said ({!r}); "
                "the rules' facts stand",
                answer[:120],
            )
        return findings


def checked(answer: str, said: str) -> list[Finding] | None:
    """The findings of a model's `answer`, each grounded in `said`; None if the answer is not valid."""
    match = _JSON.search(answer)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return None
    items = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    heard = words(said)
    findings: list[Finding] = []
    for item in items[:MAX_FINDINGS]:
        if not isinstance(item, dict):
            return None
        kind, value = item.get("kind"), item.get("value")
        detail, retract = item.get("detail") or "", bool(item.get("retract", False))
        if kind not in KINDS or not isinstance(value, str) or not isinstance(detail, str):
            return None
        value = " ".join(value.split())
        if not value or len(value) > MAX_VALUE_CHARS or len(detail) > 40:
            return None
        if not words(value) <= heard:
            continue  # not said by the user: invented, or the assistant's
        findings.append(Finding(kind, value, detail.strip().lower(), retract))
    return findings
