"""What a spoken memory request asks, in English and Mandarin, whatever the device's language.

    understand("forget that I like green tea")   # Request("fact", "en", topic="i like green tea")
    understand("清空你的记忆")                     # Request("all", "zh")
    understand("what do you remember about me")  # Request("recall", "en")
    understand("please don't forget what I told you")   # None: negated, the model answers

"all" erases everything after a confirmation; "fact" erases the facts its topic names; "recall"
lists the facts. A forgetting verb under a negation ("don't forget", "never forget", "不要忘记",
"别忘了") is no request: the first version answered "please don't forget what I told you" with
"Should I forget everything?", and "yes" erased it all. The language is the request's own (any
Chinese character: Mandarin), so a Mandarin request on an English device is understood and
answered in Mandarin. tests/state/spoken_phrasings.py holds the phrasings the rules were written
against and a held-out set; tests/state/test_spoken.py prints the misfire and miss rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

MAX_REQUEST_CHARS = 200
"""Longer utterances are conversation, not a request about memory (and bound the matching)."""

_PUNCT = re.compile(r"[^\w\s']+")
_CJK = re.compile(r"[\u4e00-\u9fff]")

_COURTESY = re.compile(r"(?:\s+(?:please|now|right now|for me|thanks|thank you|ok|okay|then))+$")
_EN_NEGATED = re.compile(
    r"\b(?:don't|dont|do not|never|not|won't|no need to|shouldn't|mustn't|stop)\s+"
    r"(?:ever\s+|you\s+)?(?:forget|forgetting|delete|erase|clear|wipe|remove)\b"
)
_EN_FORGET = r"(?:forget|delete|erase|clear|wipe|remove|reset|purge)"
_EN_ALL = re.compile(
    "|".join(
        r"\b" + _EN_FORGET + tail
        for tail in (
            r"\s+(?:about\s+)?(?:all|everything)(?:\s+(?:about|of)\s+me|\s+(?:i|you|we)\b.*)?$",
            r"\s+(?:all\s+)?(?:your|my|the)\s+(?:whole\s+|entire\s+)?(?:memory|memories|data|history)(?:\s+(?:of|about)\s+me)?$",
            r"\s+(?:all\s+)?(?:of\s+)?what\s+(?:i|you)\s+(?:said|told\s+you|know|learned|learnt|remember)(?:\s+about\s+me)?$",
            r"\s+(?:all\s+)?(?:that\s+)?(?:you\s+)?(?:know|have|remember|stored)\s+about\s+me$",
            r"\s+(?:all\s+)?(?:my|the)\s+(?:info|information|details|personal\s+(?:info|information|data))$",
            r"\s+me$",
        )
    )
)
_EN_FACT = re.compile(
    r"^(?:please\s+|can you\s+|could you\s+|would you\s+|you can\s+|just\s+|now\s+|ok\s+|okay\s+)*"
    r"(?:please\s+)?(?:forget|delete|erase|remove|unlearn)\s+(?:about\s+|that\s+|the\s+fact\s+that\s+|"
    r"what\s+i\s+(?:said|told\s+you)\s+about\s+)?(.+?)(?:\s+please)?$"
)
_EN_RECALL = re.compile(
    r"\bwhat\s+(?:do|did|else\s+do)\s+you\s+(?:remember|know|recall)\s+(?:about|of)\s+me\b"
    r"|\bwhat\s+have\s+you\s+(?:remembered|learned|learnt|stored|saved)\b"
    r"|\b(?:tell\s+me|say)\s+what\s+you\s+(?:remember|know)\s+about\s+me\b"
    r"|\bwhat\s+(?:facts|things)\s+do\s+you\s+(?:remember|know|have)\b"
    r"|\bwhat\s+(?:is\s+)?in\s+your\s+memory\b"
    r"|\bwhat\s+do\s+you\s+remember\s*$"
    r"|\bdo\s+you\s+remember\s+anything\s+about\s+me\b"
)

_ZH_NEGATED = re.compile(
    r"(?:不要|别|不用|不许|千万别|千万不要|不准|不能|不会|从不|永远不要?)(?:把.{0,12})?"
    r"(?:忘|删|清空|清除|抹掉)"
)
_ZH_FORGET = r"(?:忘掉|忘记|忘了|删除|删掉|清空|清除|抹掉|删了|清掉)"
_ZH_ALL = re.compile(
    "|".join(
        (
            _ZH_FORGET + r".{0,4}(?:所有|一切|全部|全都|都)",
            r"(?:所有|一切|全部).{0,8}" + _ZH_FORGET,
            _ZH_FORGET + r"(?:我|你)?(?:说过|说|告诉你|讲过)的(?:话|事|东西)",
            _ZH_FORGET + r".{0,2}(?:你|我)的(?:记忆|资料|信息|数据)",
            r"把(?:你的|我的)?(?:记忆|资料|信息).{0,4}" + _ZH_FORGET,
            _ZH_FORGET + r"关于我的(?:所有|一切|全部)?(?:信息|事|事情|东西|资料)?$",
            r"(?:记忆|资料|信息)(?:全部|都)?" + _ZH_FORGET,
            r"把(?:我|你)?(?:说过|说|告诉你|讲过)的(?:话|事|东西)(?:都|全|全部)?" + _ZH_FORGET,
        )
    )
)
_ZH_FACT = re.compile(r"^(?:请|请你|你|帮我|麻烦你|可以)*(?:忘掉|忘记|删除|删掉|别再记得|不要再记得|不用再记得)(.+)$")
_ZH_RECALL = re.compile(
    r"你(?:还)?(?:记得|记住了|知道|了解)(?:关于)?我(?:的)?(?:什么|哪些|多少|些什么)"
    r"|你(?:都)?记得(?:些)?什么|你对我(?:有)?(?:多少)?了解(?:多少|什么)"
    r"|关于我你(?:都)?(?:记得|知道)(?:什么|哪些)"
)


@dataclass(frozen=True, slots=True)
class Request:
    """A spoken memory request."""

    kind: Literal["all", "fact", "recall"]
    language: Literal["en", "zh"]
    topic: str = ""
    """For "fact": what the user named ("i like green tea", "我的生日")."""


def language_of(text: str) -> Literal["en", "zh"]:
    return "zh" if _CJK.search(text) else "en"


def understand(text: str) -> Request | None:
    """The memory request `text` makes, or None (the model answers it)."""
    if len(text) > MAX_REQUEST_CHARS:
        return None
    language = language_of(text)
    if language == "zh":
        return _zh(re.sub(r"[\s，,。！？!?、：:；;“”\"'‘’…]+", "", text))
    plain = " ".join(_PUNCT.sub(" ", text.lower().replace("’", "'")).split())
    return _en(_COURTESY.sub("", plain).strip())


def _en(plain: str) -> Request | None:
    if not plain or _EN_NEGATED.search(plain):
        return None
    if _EN_RECALL.search(plain):
        return Request("recall", "en")
    if _EN_ALL.search(plain):
        return Request("all", "en")
    fact = _EN_FACT.match(plain)
    if fact is not None:
        topic = fact.group(1).strip()
        if topic in ("it", "this", "that", "them", "everything", "all"):  # what "it" is, the model knows
            return Request("all", "en") if topic in ("everything", "all") else None
        return Request("fact", "en", topic)
    return None


def _zh(compact: str) -> Request | None:
    if not compact:
        return None
    if _ZH_RECALL.search(compact):
        return Request("recall", "zh")
    if _ZH_NEGATED.search(compact.replace("不要再记得", "").replace("不用再记得", "")):
        return None
    if _ZH_ALL.search(compact):
        return Request("all", "zh")
    fact = _ZH_FACT.match(compact)
    if fact is not None:
        topic = fact.group(1).strip("吧吗呢啊了")
        return Request("fact", "zh", topic) if topic and topic not in ("它", "这个", "那个") else None
    return None
