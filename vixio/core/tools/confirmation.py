"""Whether a user's reply approves a tool call that asked for confirmation, from word lists.

The lists come from config (`tools.confirm_words`, filled by the language switch). A yes must
open the reply ("yes, go ahead"); a no anywhere refuses ("yes... no, don't"). Latin words match
whole words; CJK words match anywhere, since Chinese has no spaces between words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

_PUNCTUATION = re.compile(r"[\s,.!?;:，。！？；：、~]+")


def is_confirmation(text: str, yes: Sequence[str], no: Sequence[str]) -> bool:
    """True when `text` starts with a word of `yes` and contains none of `no`."""
    cleaned = _PUNCTUATION.sub(" ", text.lower()).strip()
    if not cleaned:
        return False
    yes_pattern, no_pattern = _patterns(tuple(yes), tuple(no))
    return bool(yes_pattern and yes_pattern.match(cleaned)) and not (no_pattern and no_pattern.search(cleaned))


@lru_cache(maxsize=16)
def _patterns(yes: tuple[str, ...], no: tuple[str, ...]) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
    return _alternation(yes), _alternation(no)


def _alternation(words: tuple[str, ...]) -> re.Pattern[str] | None:
    parts = []
    for word in sorted({w.strip().lower() for w in words if w.strip()}, key=len, reverse=True):
        escaped = re.escape(word)
        parts.append(escaped if not word.isascii() else rf"\b{escaped}\b")
    return re.compile("|".join(parts)) if parts else None
