"""What the transcript of a pause says about the user's turn: evidently complete, evidently
unfinished, or no telling (then the VAD's `min_silence_ms` decides).

Two signals, each switchable (`turn.*` in the config, trade-offs in docs/providers.md):

- **sentence-final punctuation** from the ASR (`.?!。？！`): the turn is confirmed at the pause
  instead of after the full silence. ASRs punctuate partial sentences too, so this signal alone
  would answer "play some music." before "… by the Beatles"; the next one vetoes it;
- **hanging words**: a transcript ending in a word that cannot end an utterance ("set the volume
  to", "what is the weather in", "把音量调到", "我想听周杰伦的") is never confirmed early, and its
  end waits for `hanging_silence_ms` of silence instead of `min_silence_ms`.

No end-of-turn model yet. pipecat-ai's wheel carries smart-turn v3.2 (ONNX, offline), but one
inference costs ~52 ms of CPU on the reference host, twice the server's whole per-frame budget at
one pause per turn. livekit's offline model may be used only inside LiveKit Agents.
docs/providers.md weighs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["complete", "unfinished"]

_FINAL = ".?!。？！"
_TRAILING = " \t\n\"'”’）)」』"
_WORD = re.compile(r"[A-Za-z']+$")

HANGING_EN = frozenset(
    """
a an the my your its our their
to of in at for with by into onto about than as via per
and or but nor because if unless until while whether although though
is are was were
what's where's who's it's there's i'm you're we're they're i'd i'll
""".split()
)
"""English words after which an utterance goes on. Left out because requests end on them:
particles of phrasal verbs (on, off, up, down, out: "turn the light on"), demonstratives ("what
is this"), verbs and modals ("what should I do", "yes I can"), "from" ("where are you from"),
"so", "please", "more", "no"."""

HANGING_ZH = (
    "和",
    "跟",
    "与",
    "及",
    "或",
    "或者",
    "还是",
    "还有",
    "而且",
    "并且",
    "然后",
    "接着",
    "因为",
    "所以",
    "但是",
    "可是",
    "不过",
    "如果",
    "要是",
    "虽然",
    "的话",
    "在",
    "把",
    "给",
    "被",
    "让",
    "从",
    "往",
    "向",
    "比",
    "为了",
    "关于",
    "除了",
    "帮我",
    "我想",
    "我要",
    "请",
    "就是",
    "是",
    "的",
    "地",
    "到",
    "调成",
    "设为",
    "设置为",
    "设置成",
    "改成",
)
"""Mandarin endings after which an utterance goes on (conjunctions, prepositions, structural 的,
a verb waiting for its object)."""

_COUNTED_ZH = re.compile(r"(?<![来要])[一两几每哪][个首部本张只条件位杯支台首篇]$")
"""A numeral and its classifier with the noun still to come ("放一首" … "周杰伦的歌"); after 来/要
("来一个") it is a whole request."""

_COMPLETE_ZH = (
    "好的",
    "是的",
    "对的",
    "真的",
    "行的",
    "可以的",
    "没事的",
    "我的",
    "你的",
    "收到",
    "找到",
    "做到",
    "办到",
    "迟到",
    "是",
)
"""Endings that look hanging but are whole answers ("好的", "是的", "收到"); "是" alone is a yes."""


@dataclass(frozen=True, slots=True)
class EndpointRules:
    """Which signals judge a pause's transcript."""

    punctuation: bool = True
    """Sentence-final punctuation confirms the turn at the pause."""
    hanging_words: bool = True
    """A hanging last word vetoes an early confirmation and extends the silence to wait."""
    hanging_silence_ms: int = 900
    """Silence that ends an utterance whose transcript hangs (used when > min_silence_ms)."""

    def judge(self, text: str) -> tuple[Verdict, str] | None:
        """(verdict, the signal that decided) for the transcript of a pause, or None."""
        stripped = text.rstrip(_TRAILING)
        if not stripped:
            return None
        if self.hanging_words and (word := hanging_ending(stripped)):
            return "unfinished", f"ends in {word!r}"
        if self.punctuation and stripped[-1] in _FINAL and not stripped.endswith(("...", "…")):
            return "complete", f"ends in {stripped[-1]!r}"
        return None


def hanging_ending(text: str) -> str | None:
    """The last word of `text` when an utterance cannot end on it, else None."""
    body = text.rstrip(_TRAILING + _FINAL + ",，、;；:：…")
    if not body:
        return None
    if body[-1].isascii():
        found = _WORD.search(body)
        word = found.group().lower().replace("’", "'") if found else ""
        return word if word in HANGING_EN else None
    if body == "是" or body.endswith(_COMPLETE_ZH[:-1]):
        return None
    for ending in HANGING_ZH:
        if body.endswith(ending):
            return ending
    counted = _COUNTED_ZH.search(body)
    return counted.group() if counted else None
