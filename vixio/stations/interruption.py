"""InterruptionArbiter: whether speech over the reply is a barge-in, decided the way a person does.

Stopping at every VAD start makes the reply's own echo, a cough or an "uh-huh" cut the answer
off (livekit agents and pipecat users report it; so did issue 48's measurements: 42 spurious
turns in 5 replies). Waiting for a transcript makes "stop" take a second. So, as livekit's
`resume_false_interruption`: speech over the reply *pauses* it at once (the VAD's start, ~250 ms
after onset: the device hears `tts stop` then, so the user is not talked over), and then

- the speech goes on for `confirm_ms` (a question, "no wait, I meant..."): a real interruption,
  the reply is cancelled and the new turn runs;
- it ends sooner and its transcript is a command or has `min_words` words that are not
  backchannels ("stop", "wait", "what time is it"): a real interruption;
- it ends sooner with no words, or only backchannels ("uh-huh", "yeah", "ok", "嗯", a cough that
  transcribes as nothing), or no transcript comes within `resume_after_ms`: a false
  interruption, the reply resumes where the device stopped hearing it.

Without `wait_for_transcript` (how VADStation runs it today: no transcript of held speech is
made yet) short speech resumes at its end, so a short "stop" is heard as a backchannel.

Pure logic on a clock it is given (`now`, seconds): the caller performs the actions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Action = Literal["pause", "interrupt", "resume"]

BACKCHANNELS = frozenset(
    {
        "uh",
        "huh",
        "uh-huh",
        "uhhuh",
        "mhm",
        "mm",
        "mmm",
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
        "i",
        "see",
        "got",
        "it",
        "cool",
        "nice",
        "wow",
        "really",
        "alright",
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
    }
)
"""Words that, alone, acknowledge rather than interrupt."""
COMMANDS = frozenset({"stop", "wait", "no", "pause", "quiet", "enough", "停", "停下", "等等", "别说了", "不是", "闭嘴"})
"""Words that interrupt on their own, however short the utterance."""

_WORD = re.compile(r"[\w'-]+|[\u4e00-\u9fff]")


@dataclass(slots=True)
class InterruptionCounts:
    real: int = 0
    false: int = 0


@dataclass(slots=True)
class InterruptionArbiter:
    confirm_ms: int = 600
    """Speech over the reply that lasts this long interrupts whatever it says."""
    min_words: int = 2
    """A shorter utterance interrupts when its transcript has this many non-backchannel words (or a command word)."""
    resume_after_ms: int = 1500
    """A paused reply resumes if no verdict came this long after the pause."""
    wait_for_transcript: bool = False
    """Short speech waits for `transcript` (up to `resume_after_ms`); False: it resumes at its end."""
    counts: InterruptionCounts = field(default_factory=InterruptionCounts)
    _paused_at: float | None = None
    _onset: float | None = None
    _ended: bool = False

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def speech_started(self, now: float, onset: float, bot_speaking: bool) -> Action | None:
        """The VAD found speech that began at `onset`: pause the reply if one is playing."""
        if not bot_speaking or self.paused:
            return None
        self._paused_at, self._onset, self._ended = now, onset, False
        return "pause"

    def tick(self, now: float, speaking: bool) -> Action | None:
        """Called as audio arrives (`speaking`: the latest audio is voiced, not the silence
        before an end): confirms long speech, gives up on a verdict that never came."""
        if not self.paused:
            return None
        assert self._onset is not None and self._paused_at is not None
        if speaking and not self._ended and now - self._onset + 1e-9 >= self.confirm_ms / 1000:
            return self._decide("interrupt")
        if now - self._paused_at + 1e-9 >= self.resume_after_ms / 1000 and (self._ended or not speaking):
            return self._decide("resume")
        return None

    def speech_ended(self, now: float, end: float | None = None) -> Action | None:
        """The VAD's end of the speech (decided at `now`, after its silence window; the speech
        itself ended at `end`): short speech waits for its transcript (`transcript`) or resumes."""
        if not self.paused:
            return None
        assert self._onset is not None
        self._ended = True
        if (now if end is None else end) - self._onset + 1e-9 >= self.confirm_ms / 1000:
            return self._decide("interrupt")
        return None if self.wait_for_transcript else self._decide("resume")

    def transcript(self, text: str) -> Action | None:
        """The short utterance's words: a command or enough real words interrupt; else resume."""
        if not self.paused:
            return None
        return self._decide("interrupt" if is_interrupting(text, self.min_words) else "resume")

    def _decide(self, action: Action) -> Action:
        if action == "interrupt":
            self.counts.real += 1
        else:
            self.counts.false += 1
        self._paused_at = self._onset = None
        self._ended = False
        return action


def is_interrupting(text: str, min_words: int = 2) -> bool:
    """True when `text` asks the assistant to stop or says something of its own."""
    words = [w.lower().strip("'-") for w in _WORD.findall(text)]
    if any(w in COMMANDS for w in words) or any(c in text for c in ("别说", "停")):
        return True
    return sum(1 for w in words if w and w not in BACKCHANNELS) >= min_words
