"""Text helpers for speech: sentence boundaries, markdown and emoji removal, reply emotion."""

from __future__ import annotations

import re

# Sentence ends: CJK punctuation ends a sentence at once; Latin . ! ? only before whitespace
# (so "3.14" and "e.g.x" stay whole), which is why a trailing "." waits for the next delta.
_CJK_END = "。！？；…\n"
_LATIN_END = ".!?;"
_CLAUSE = "，,、：:"

# A "." after these never ends a sentence: a name or an example follows ("Mrs. Lee", "e.g. tea").
_NEVER_FINAL = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "mt", "vs", "e.g", "i.e", "cf", "approx", "fig"})
# After these (and dotted initialisms: "U.S.", "p.m.") a sentence may end or go on ("3 p.m. today",
# "at 3 p.m. Then"): it ends only when the next word starts with a capital letter.
_MAYBE_FINAL = frozenset({"etc", "inc", "ltd", "co", "jr", "sr"})
_INITIALISM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_NEXT_WORD = re.compile(r"\S")

_FENCE = re.compile(r"```.*?(```|$)", re.S)
_INLINE_CODE = re.compile(r"`([^`]*)`")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*", re.M)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+", re.M)
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.M)
_PICTOGRAPHS = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U00002b00-\U00002bff\U0001f1e6-\U0001f1ff\ufe0f\u200d\u20e3]"
)
_SPACES = re.compile(r"\s+")

EMOJI_EMOTIONS = {
    "😀": "happy",
    "😃": "happy",
    "😄": "happy",
    "🙂": "happy",
    "😊": "happy",
    "☺": "happy",
    "😁": "laughing",
    "😂": "laughing",
    "🤣": "laughing",
    "😆": "funny",
    "😜": "silly",
    "🤪": "silly",
    "😢": "sad",
    "😞": "sad",
    "🙁": "sad",
    "😔": "sad",
    "😭": "crying",
    "😠": "angry",
    "😡": "angry",
    "😍": "loving",
    "🥰": "loving",
    "❤": "loving",
    "😳": "embarrassed",
    "😮": "surprised",
    "😯": "surprised",
    "😲": "shocked",
    "😱": "shocked",
    "🤔": "thinking",
    "😉": "winking",
    "😎": "cool",
    "😌": "relaxed",
    "😋": "delicious",
    "😘": "kissy",
    "😏": "confident",
    "😴": "sleepy",
    "😕": "confused",
    "😐": "neutral",
}


CJK_CHAR_WEIGHT = 2.5
"""A Chinese character counts as this many Latin characters towards `min_clause_chars`: it is a
syllable, which takes 2-3 Latin letters ("今天北京，" is as long to say as "In Beijing,")."""


def _is_cjk(char: str) -> bool:
    return "\u3400" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff"


def find_sentence_end(text: str, *, allow_clause: bool = False, min_clause_chars: int = 8) -> int:
    """Index just past the first complete sentence in `text`, or -1 if there is none yet.

    With `allow_clause` a comma (，,、：:) also ends it once the clause before it is at least
    `min_clause_chars` long, a Chinese character counting `CJK_CHAR_WEIGHT`, so the first
    clause of a reply reaches the TTS sooner in either language.
    """
    spoken = 0.0
    for index, char in enumerate(text):
        spoken += CJK_CHAR_WEIGHT if _is_cjk(char) else 1.0
        if char in _CJK_END:
            return index + 1
        if char in _LATIN_END:
            if index + 1 < len(text) and text[index + 1].isspace():
                ends = True if char != "." else _period_ends(text, index)
                if ends is None:
                    return -1  # the next word decides: wait for it
                if ends:
                    return index + 1
        elif allow_clause and char in _CLAUSE and spoken >= min_clause_chars:
            if char in "，、" or (index + 1 < len(text) and text[index + 1].isspace()):
                return index + 1
    return -1


def _period_ends(text: str, index: int) -> bool | None:
    """Whether the "." at `index` (whitespace follows) ends a sentence; None: the next word, not
    yet received, decides."""
    start = index
    while start > 0 and (text[start - 1].isascii() and text[start - 1].isalpha() or text[start - 1] == "."):
        start -= 1
    word = text[start:index]
    if not word or start > 0 and text[start - 1].isalpha():
        return True
    if len(word) == 1 and word.isupper() and word != "I":
        return False  # an initial: "J. K. Rowling"
    lowered = word.lower()
    if lowered in _NEVER_FINAL:
        return False
    if lowered not in _MAYBE_FINAL and not _INITIALISM.fullmatch(word):
        return True
    following = _NEXT_WORD.search(text, index + 1)
    return None if following is None else following.group().isupper()


def speakable(text: str) -> str:
    """What a TTS should say of `text`: no markdown, no code blocks, no emoji, tidy spaces."""
    text = _FENCE.sub(" ", text)
    text = _INLINE_CODE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _TABLE_RULE.sub(" ", text)
    text = _HEADING.sub("", text)
    text = _BULLET.sub("", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = text.replace("|", " ").replace("#", " ").replace("*", " ")
    text = _PICTOGRAPHS.sub("", text)
    return _SPACES.sub(" ", text).strip()


def leading_emotion(text: str) -> tuple[str, str] | None:
    """(emotion, emoji) when `text` starts with an emoji of the vocabulary, else None."""
    stripped = text.lstrip()
    for emoji, emotion in EMOJI_EMOTIONS.items():
        if stripped.startswith(emoji):
            return emotion, emoji
    return None


def starts_with_pictograph(text: str) -> bool:
    stripped = text.lstrip()
    return bool(stripped) and bool(_PICTOGRAPHS.match(stripped[0]))
