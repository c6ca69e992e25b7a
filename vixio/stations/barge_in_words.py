"""What the words of speech over a reply say about it: a command, something new, the reply's own
echo, a backchannel, or too little to tell.

The interruption arbiter (stations/interruption.py) pauses the reply at speech over it and holds
the speech; the VAD station transcribes the held audio as it grows and asks `WordRules.classify`.
Length alone cannot tell these apart: measured over a reply (docs/barge-in.md), "Okay." with the
VAD's padding lasts past 600 ms about half the time and "Stop." a little less, and what AEC3
leaves of the reply is speech to Silero. Their words can:

- `command`: a word or phrase of `commands` ("stop", "wait", "停", "等一下", "别说了");
- `echo`: most of the words, in order, are the sentence being played (what the canceller left of
  the reply transcribes as the reply);
- `new`: `min_words` or more words that are neither backchannels nor the reply (a question, "no I
  meant..."); Chinese counts two characters as a word (no spaces to count by);
- `backchannel`: only backchannels ("uh-huh", "okay", "嗯", "好的");
- `unsure`: one new word, or a few, or no words at all (Whisper returns "" or one of its stock
  phrases for noise, `NOT_SPEECH`): the speech's length decides, as without words. No words is
  not taken for a backchannel because AEC3 dims a user talking over the reply until Whisper
  hears nothing or "Thank you." (measured, docs/barge-in.md: as a backchannel, 22.5 % of
  questions were missed; by length, 18 %, with coughs cancelling 11.8 % against 5.9 %).

Like pipecat's MinWordsInterruptionStrategy this counts words of a partial transcript; unlike it
(and like livekit agents' false-interruption handling) a backchannel does not count, and, as
neither does, the sentence being played is compared: on a single-mic board the reply's own
residue is the commonest false interruption.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Literal

Heard = Literal["command", "new", "echo", "backchannel", "unsure"]

COMMANDS: tuple[str, ...] = (
    "stop",
    "wait",
    "hold on",
    "hang on",
    "pause",
    "be quiet",
    "quiet",
    "shut up",
    "enough",
    "cancel",
    "no no",
    "停",
    "停下",
    "停一下",
    "等等",
    "等一下",
    "别说了",
    "不要说了",
    "闭嘴",
    "安静",
    "暂停",
)
"""Words and phrases that interrupt on their own, however short the utterance."""
BACKCHANNELS: tuple[str, ...] = (
    "uh",
    "huh",
    "uh-huh",
    "uh huh",
    "uhhuh",
    "mhm",
    "mm",
    "mmm",
    "mm-hmm",
    "mm hmm",
    "hmm",
    "hm",
    "um",
    "umm",
    "ah",
    "oh",
    "yeah",
    "yes",
    "yep",
    "ok",
    "okay",
    "right",
    "sure",
    "i see",
    "got it",
    "cool",
    "nice",
    "wow",
    "really",
    "alright",
    "all right",
    "嗯",
    "嗯嗯",
    "哦",
    "噢",
    "啊",
    "好",
    "好的",
    "对",
    "对对",
    "是",
    "是的",
    "行",
    "恩",
)
"""Words that, alone, acknowledge rather than interrupt."""
NOT_SPEECH: tuple[str, ...] = ("you", "thank you", "thanks for watching", "bye", "字幕", "谢谢观看")
"""Whole transcripts Whisper is known to give for noise and breath (its training data's credits):
no words."""

_TOKEN = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|[\u3400-\u9fff]")
_CJK = re.compile(r"[\u3400-\u9fff]")
MAX_CHARS = 400
"""A transcript is cut to this many characters: held speech lasts at most a few seconds."""


def tokens(text: str) -> list[str]:
    """Lower-case words and single CJK characters, punctuation dropped."""
    return _TOKEN.findall(text[:MAX_CHARS].lower().replace("’", "'"))


def _phrases(words: Iterable[str]) -> list[tuple[str, ...]]:
    """Each configured phrase as a token tuple, longest first (so "uh-huh" wins over "uh")."""
    out = {tuple(tokens(w)) for w in words}
    return sorted((p for p in out if p), key=len, reverse=True)


def _weight(rest: list[str]) -> float:
    """Words in `rest`: a Latin word is one, a CJK character half of one."""
    return sum(0.5 if _CJK.fullmatch(t) else 1.0 for t in rest)


@dataclass(slots=True)
class WordRules:
    """How held speech's transcript is judged (`vad.barge_in_*` keys)."""

    commands: Iterable[str] = COMMANDS
    backchannels: Iterable[str] = BACKCHANNELS
    min_words: int = 2
    """Words (not backchannels, not the reply's) that make speech over the reply a new turn."""
    echo_share: float = 0.7
    """Share of the transcript's tokens found, in order, in the sentence being played for it to
    be that sentence's echo (and at least two tokens)."""
    _commands: list[tuple[str, ...]] = field(init=False)
    _backchannels: list[tuple[str, ...]] = field(init=False)
    _not_speech: set[tuple[str, ...]] = field(init=False)

    def __post_init__(self) -> None:
        self._commands = _phrases(self.commands)
        self._backchannels = _phrases(self.backchannels)
        self._not_speech = set(_phrases(NOT_SPEECH))

    def classify(self, text: str, playing: str = "", final: bool = True) -> Heard:
        """What `text` (held speech's transcript) is, `playing` being the reply's sentence(s) the
        board is playing. A partial transcript (`final` False) is of speech cut mid-word, which
        Whisper completes as it likes ("Sto-" came back as "That's it."): its last word does not
        count towards `new`."""
        heard = tokens(text)
        if not heard or tuple(heard) in self._not_speech:
            return "unsure"  # a cough, or a user the canceller dimmed: the length decides
        said = heard if final or len(heard) < 3 else heard[:-1]
        if len(said) >= 2 and playing:
            reply = tokens(playing)
            blocks = SequenceMatcher(None, said, reply, autojunk=False).get_matching_blocks()
            if sum(b.size for b in blocks if b.size >= 2 or len(said) <= 3) >= self.echo_share * len(said):
                return "echo"
        if any(_find(heard, p) >= 0 for p in self._commands):
            return "command"
        rest = _strip(heard, self._backchannels)
        if not rest:
            return "backchannel"
        return "new" if _weight(rest if final else rest[:-1]) >= self.min_words else "unsure"


def _find(heard: list[str], phrase: tuple[str, ...]) -> int:
    n = len(phrase)
    for i in range(len(heard) - n + 1):
        if tuple(heard[i : i + n]) == phrase:
            return i
    return -1


def _strip(heard: list[str], phrases: list[tuple[str, ...]]) -> list[str]:
    """`heard` without any of `phrases` (longest first)."""
    out: list[str] = []
    i = 0
    while i < len(heard):
        for p in phrases:
            if tuple(heard[i : i + len(p)]) == p:
                i += len(p)
                break
        else:
            out.append(heard[i])
            i += 1
    return out
