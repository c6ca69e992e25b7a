"""Facts from what the user said, by rules: names, likes, dislikes, birthdays and dates, family
members, where they live, and what they asked to be remembered, in English and Mandarin.

    extract("My name is Alice and I like green tea")
    # [Finding("name", "Alice"), Finding("like", "green tea")]
    extract("I like coffee now, not tea")
    # [Finding("like", "coffee"), Finding("like", "tea", retract=True)]

Why rules: the offline default model (SmolLM2-135M) does not extract facts; asked to, it wrote
"I'm sorry for your loss… I've lost all of my memories", which was then fed back as memory. A
rule only keeps what the user plainly said about themselves, so it stores no nonsense; it misses
what is said another way (bench/bench_memory_quality.py measures both). Only the user's words
are read, never the assistant's. Questions ("what is my name?", "我叫什么") and negated
statements ("my name is not Bob") are left out. Each utterance is bounded by the recorder
(4,000 characters); the patterns are linear (no nested repetition), ~20 us per sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vixio.state.facts import MAX_VALUE_CHARS, FactKind


@dataclass(frozen=True, slots=True)
class Finding:
    """One statement found in an utterance, before it is merged with what is known."""

    kind: FactKind
    value: str
    detail: str = ""
    """What a value is of: the relation of a family member, the occasion of a date."""
    retract: bool = False
    """The user said it no longer holds ("not tea any more"): matching facts go."""


_CJK = re.compile(r"[\u4e00-\u9fff]")
_CLAUSES = re.compile(
    r"[.!?;。！？；\n]+|,\s*(?=(?:and\s+)?(?:i|my|i'm)\b)|\s+(?:and|but)\s+(?=(?:i|my|i'm|i've)\b)", re.IGNORECASE
)
_QUESTION = re.compile(
    r"^\s*(?:what|who|where|when|how|why|which|do|does|did|is|are|can|could|will|would|should)\b", re.IGNORECASE
)
_NEGATED = re.compile(r"\b(?:don'?t|do not|didn'?t|never|not|no longer|can'?t|cannot)\s*$", re.IGNORECASE)
_TRAILING = re.compile(
    r"(?:\s+(?:now|too|as well|also|very much|so much|a lot|anymore|any more|these days|"
    r"again|though|actually|please|right|ok|okay|last year|this year|recently|since \w+|"
    r"a (?:few|couple of) (?:days|weeks|months|years) ago|\w+ (?:days|weeks|months|years) ago))+\s*$",
    re.IGNORECASE,
)
_STOP_NAMES = {
    "not",
    "no",
    "sorry",
    "here",
    "back",
    "fine",
    "good",
    "ok",
    "okay",
    "tired",
    "busy",
    "going",
    "just",
    "a",
    "the",
    "your",
    "what",
    "who",
    "sure",
    "ready",
    "done",
    "home",
    "happy",
    "sad",
    "hungry",
    "it",
}
_NAME = r"([A-Za-z][A-Za-z'\-]{0,30}(?:\s+[A-Z][A-Za-z'\-]{0,30}){0,2})"

_EN_FAMILY = (
    "wife",
    "husband",
    "son",
    "daughter",
    "mother",
    "mom",
    "mum",
    "father",
    "dad",
    "brother",
    "sister",
    "partner",
    "boyfriend",
    "girlfriend",
    "grandmother",
    "grandma",
    "grandfather",
    "grandpa",
    "child",
    "kid",
    "baby",
    "dog",
    "cat",
)
_EN_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), kind)
    for p, kind in (
        (r"\bmy name(?:'s| is)\s+" + _NAME, "name"),
        (r"\b(?:call me|i'?m called|i am called|people call me)\s+" + _NAME, "name"),
        (
            r"\bmy (" + "|".join(_EN_FAMILY) + r")(?:'s name is|'s called| is called| is named| is|'s)\s+" + _NAME,
            "family",
        ),
        (r"\bi have an? (" + "|".join(_EN_FAMILY) + r") (?:called|named)\s+" + _NAME, "family"),
        (r"\bmy birthday is (?:on )?(.+)", "birthday"),
        (r"\bi was born on (.+)", "birthday"),
        (r"\bmy ([a-z]+(?: [a-z]+)?) is on (.+)", "date"),
        (r"\b(?:i live|i'm living|i am living|we live)(?: now)? in (.+)", "home"),
        (r"\b(?:i (?:have )?moved|we (?:have )?moved) to (.+)", "home"),
        (r"\bmy (?:home|house) is in (.+)", "home"),
        (r"\bmy fav(?:ou?rite) ([a-z]+(?: [a-z]+)?) is (.+)", "favourite"),
        (
            r"\bi (?:really |also |still |do |now |truly )?(?:like|love|enjoy|adore|prefer)s?\s+(?!to\b(?! \w+ing))(.+)",
            "like",
        ),
        (r"\bi (?:really |also |still |now )?(?:dislike|hate|can'?t stand|detest)\s+(.+)", "dislike"),
        (r"\bi (?:really |also |still |now )?(?:don'?t|do not) (?:like|love|enjoy)\s+(.+)", "dislike"),
        (r"\bi no longer (?:like|love|enjoy)\s+(.+)", "unlike"),
        (r"\bremember that (.+)", "note"),
    )
)
_DATE_WORDS = re.compile(
    r"\d|january|february|march|april|may|june|july|august|september|october|november|"
    r"december|jan\b|feb\b|mar\b|apr\b|jun\b|jul\b|aug\b|sep\b|oct\b|nov\b|dec\b",
    re.IGNORECASE,
)
_PRONOUNS = {
    "it",
    "this",
    "that",
    "them",
    "him",
    "her",
    "you",
    "these",
    "those",
    "one",
    "so",
    "too",
    "most",
    "more",
    "best",
    "the most",
    "much",
    "it most",
    "it more",
    "it a lot",
    "that most",
}
"""An object that only points ("I like it") or is a degree ("what I love most"): no fact in it."""
_NOT_OBJECT = re.compile(r",?\s+(?:not|instead of|rather than|more than)\s+(.+)$", re.IGNORECASE)

_ZH_STOP = r"(?=[，,。！？!?、\s]|我|和|而且|但|今年|住|喜欢|的|呢|啊|吧|了|就|哦|呀|好了|$)"
_ZH_NAME = r"([\u4e00-\u9fff·]{1,5}?|[A-Za-z][A-Za-z\-]{0,30})" + _ZH_STOP
_ZH_FAMILY = (
    "妻子",
    "老婆",
    "丈夫",
    "老公",
    "儿子",
    "女儿",
    "妈妈",
    "母亲",
    "爸爸",
    "父亲",
    "哥哥",
    "姐姐",
    "弟弟",
    "妹妹",
    "孩子",
    "爷爷",
    "奶奶",
    "外公",
    "外婆",
    "男朋友",
    "女朋友",
)
_ZH_OBJ = r"([^，,。！？!?；;、]{1,20}?)(?=[，,。！？!?；;、]|了|啦|呢|啊|$|不是|而不是|，不)"
_ZH_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), kind)
    for p, kind in (
        (r"(?:我叫|我的名字是|我的名字叫|我名字叫|叫我)" + _ZH_NAME, "name"),
        (r"我的?(" + "|".join(_ZH_FAMILY) + r")(?:叫|的名字是|名字叫|是)" + _ZH_NAME, "family"),
        (r"我的?生日是?(?:在)?([^，,。！？!?]{2,12}?)(?=[，,。！？!?]|$)", "birthday"),
        (r"我(?:是)?([^，,。！？!?我]{2,12}?)(?:出生|生)的", "birthday"),
        (r"我(?:现在|目前)?(?:住在|家在|搬到了?)" + _ZH_OBJ, "home"),
        (r"我最喜欢的([\u4e00-\u9fff]{1,4})是" + _ZH_OBJ, "favourite"),
        (r"我(?:很|非常|特别|最|也|还是|现在|一直|真的)*(?:不喜欢|不爱|讨厌|受不了)" + _ZH_OBJ, "dislike"),
        (r"我(?:很|非常|特别|最|也|还是|现在|一直|真的)*(?:喜欢|爱喝|爱吃|爱看|爱听|爱玩|热爱|喜爱)" + _ZH_OBJ, "like"),
        (r"(?:请)?记住" + r"([^。！？!?]{2,60})", "note"),
    )
)
_ZH_NOT_OBJECT = re.compile(
    r"(?:，|,)?\s*(?:而?不是|不喜欢|不再喜欢)([^，,。！？!?]{1,12}?)(?:了|啦)?(?=[，,。！？!?]|$)"
)
_ZH_QUESTION = re.compile(r"什么|谁|哪|吗|几|多少")
_ZH_DATE = re.compile(r"\d|[一二三四五六七八九十]+月|号|日")


def extract(text: str) -> list[Finding]:
    """The statements in one user utterance (English and Mandarin, mixed freely)."""
    text = text.strip()[:4000]
    if not text:
        return []
    found = _zh(text) if _CJK.search(text) else []
    for clause in _CLAUSES.split(text):
        if clause and not _QUESTION.match(clause):
            found += _en(clause.strip())
    return _unique(found)


def _en(clause: str) -> list[Finding]:
    found: list[Finding] = []
    taken = 0
    for pattern, kind in _EN_RULES:
        match = pattern.search(clause)
        if match is None or match.start() < taken or _NEGATED.search(clause[: match.start()]):
            continue
        if kind in ("like", "dislike", "unlike") and re.search(
            r"\b(?:i'd|i would|would you)\s*$", clause[: match.start()], re.IGNORECASE
        ):
            continue
        if kind == "name":
            name = _name(match.group(1))
            if name:
                found.append(Finding("name", name))
        elif kind == "family":
            name = _name(match.group(2))
            if name:
                found.append(Finding("family", f"{match.group(1).lower()} {name}", detail=match.group(1).lower()))
        elif kind in ("birthday", "date"):
            when = _value(match.group(match.lastindex or 1))
            if when and _DATE_WORDS.search(when):
                found.append(
                    Finding("birthday", when)
                    if kind == "birthday"
                    else Finding("date", f"{match.group(1).lower()} on {when}", detail=match.group(1).lower())
                )
        elif kind == "favourite":
            what, value = match.group(1).lower(), _value(match.group(2))
            if value:
                found.append(Finding("like", f"{value} (favourite {what})", detail=f"favourite {what}"))
        elif kind == "note":
            note = _value(match.group(1), keep=MAX_VALUE_CHARS)
            if note:
                found.append(Finding("note", note))
        else:
            found += _liking(kind, match.group(1))
        taken = match.end()
    return found


def _liking(kind: str, said: str) -> list[Finding]:
    """`like`/`dislike`/`unlike` of "coffee now, not tea": the object, and what it replaces."""
    found: list[Finding] = []
    instead = _NOT_OBJECT.search(said)
    if instead is not None:
        said = said[: instead.start()]
        dropped = _value(instead.group(1))
        if dropped:
            found.append(Finding("like" if kind == "like" else "dislike", dropped, retract=True))
    value = _value(said)
    if not value:
        return found
    if kind == "unlike":
        return [Finding("like", value, retract=True)]
    return [Finding(kind, value), *found]  # type: ignore[arg-type]


def _zh(text: str) -> list[Finding]:
    found: list[Finding] = []
    for pattern, kind in _ZH_RULES:
        for match in pattern.finditer(text):
            groups = [g for g in match.groups() if g]
            value = groups[-1].strip() if groups else ""
            if not value or _ZH_QUESTION.search(value) or match.start() > 0 and text[match.start() - 1] in "不别没":
                continue
            if value[0] in "的得地" or value in ("它", "这个", "那个", "这", "那"):  # "最喜欢的…": the favourite rule's
                continue
            if kind == "name":
                found.append(Finding("name", value))
            elif kind == "family":
                found.append(Finding("family", f"{groups[0]}{value}", detail=groups[0]))
            elif kind == "birthday":
                if _ZH_DATE.search(value):
                    found.append(Finding("birthday", value))
            elif kind == "favourite":
                found.append(Finding("like", f"{value}（最喜欢的{groups[0]}）", detail=f"最喜欢的{groups[0]}"))
            elif kind == "note":
                if "声音" not in value:  # "remember my voice" enrols a speaker, it is no fact
                    found.append(Finding("note", value[:MAX_VALUE_CHARS]))
            elif kind == "home":
                found.append(Finding("home", value))
            else:
                found.append(Finding(kind, value))  # type: ignore[arg-type]
                for instead in _ZH_NOT_OBJECT.finditer(text, match.end()):
                    found.append(Finding("like", instead.group(1).strip(), retract=True))
    return found


def _name(said: str) -> str:
    words = said.strip().split()
    kept: list[str] = []
    for word in words:
        if word.lower() in _STOP_NAMES or word.lower() in (
            "and",
            "but",
            "so",
            "i",
            "from",
            "by",
            "please",
            "thanks",
            "now",
            "then",
            "instead",
        ):
            break
        kept.append(word.strip("'-"))
    name = " ".join(kept)
    return name[:1].upper() + name[1:] if name else ""


def _value(said: str, keep: int = 60) -> str:
    """A stated object without its trailing fillers and punctuation, or "" when too long to be one."""
    value = _TRAILING.sub("", said.strip().strip(",.;:!?\"'")).strip(",.;:!?\"' ")
    value = re.sub(r"^(?:very much|a lot|so much)\s+", "", value, flags=re.IGNORECASE)
    if not value or len(value) > keep or _QUESTION.match(value) or value.lower() in _PRONOUNS:
        return ""
    return value.lower() if not any(w[:1].isupper() for w in value.split()[1:]) and not value[:1].isupper() else value


def _unique(found: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, bool]] = set()
    kept = []
    for finding in found:
        marker = (finding.kind, finding.value.lower(), finding.retract)
        if marker not in seen:
            seen.add(marker)
            kept.append(finding)
    return kept
