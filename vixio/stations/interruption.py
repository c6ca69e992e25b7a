"""InterruptionArbiter: whether speech over the reply is a barge-in, decided the way a person does.

Stopping at every VAD start makes the reply's own echo, a cough or an "uh-huh" cut the answer
off (livekit agents and pipecat users report it; so did issue 48's measurements: 42 spurious
turns in 5 replies). Waiting for a transcript makes "stop" take a second. So, as livekit's
`resume_false_interruption`: speech over the reply *pauses* it at once (the VAD's start, ~250 ms
after onset: the device hears `tts stop` then, so the user is not talked over), and then, by
length alone (`words` None):

- the speech goes on for `confirm_ms`: a real interruption, the reply is cancelled and the held
  speech starts the new turn;
- it ends sooner: a false interruption, the reply resumes where the device stopped hearing it.

Length alone cannot tell "Stop." from "Okay." (both ~600 ms with the VAD's padding), so with
`words` the held speech is transcribed as it grows (the VAD station asks; `heard` gets each
transcript, `barge_in_words.WordRules` judges it) and its words decide first:

- a command ("stop", "停") or `min_words` new words: a barge-in now, however short;
- the sentence being played (the canceller's residue): the reply resumes now;
- backchannels ("uh-huh", "嗯"): the reply resumes when the speech ends, even past
  `confirm_ms`; speech still going at `max_hold_ms` interrupts whatever it says;
- no words (a cough; or a user the canceller dimmed, which Whisper hears as "" or "Thank you."), a
  word of neither, or no transcript yet: the next transcript is waited for (a partial's last
  word is often cut, and Whisper completes it as it likes: "the weath-" came back "the water");
  after the speech's end, with still no more to go on (or a failing ASR), by length as without
  words.

So before `max_hold_ms` only words interrupt; a reply paused for a real question the ASR cannot
make out is cancelled at `max_hold_ms` (or at the speech's end, by its length).

A paused reply whose verdict never comes is decided `resume_after_ms` after the pause (with words:
after the speech's end, by the words so far, else by length), as livekit's
`false_interruption_timeout`.

Pure logic on a clock it is given (`now`, seconds): the caller performs the actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vixio.config.pipeline import VADConfig
from vixio.stations.barge_in_words import BACKCHANNELS, COMMANDS, Heard, WordRules

Action = Literal["pause", "interrupt", "resume"]


@dataclass(slots=True)
class InterruptionCounts:
    real: int = 0
    false: int = 0


@dataclass(slots=True)
class InterruptionArbiter:
    confirm_ms: int = 600
    """Speech over the reply that lasts this long interrupts (with `words`: unless its words say
    it is a backchannel or the reply's echo)."""
    words: WordRules | None = None
    """None: judged by length alone; else held speech's transcripts (`heard`) decide first."""
    max_hold_ms: int = 1500
    """With `words`: speech over the reply still going this long after its onset interrupts
    whatever its words (the held audio is bounded by it)."""
    resume_after_ms: int = 1500
    """A paused reply whose verdict did not come this long after the pause (with `words`: after
    the VAD's end of the speech) is decided by its words so far, else by length."""
    counts: InterruptionCounts = field(default_factory=InterruptionCounts)
    heard_as: tuple[str, Heard] | None = None
    """The latest transcript of held speech and what it was judged (kept after the verdict)."""
    _paused_at: float | None = None
    _onset: float | None = None
    _end: float | None = None
    _ended_at: float | None = None
    _class: Heard | None = None

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    @property
    def listening(self) -> bool:
        """Paused, with words: the held speech's transcripts are wanted."""
        return self.paused and self.words is not None

    @property
    def ended(self) -> bool:
        return self._end is not None

    def speech_started(self, now: float, onset: float, bot_speaking: bool) -> Action | None:
        """The VAD found speech that began at `onset`: pause the reply if one is playing."""
        if not bot_speaking or self.paused:
            return None
        self._paused_at, self._onset, self._end, self._ended_at, self._class = now, onset, None, None, None
        self.heard_as = None
        return "pause"

    def speech_continued(self) -> None:
        """The VAD found speech again while the last speech's final transcript was awaited: the
        same held speech goes on."""
        if self.paused:
            self._end = self._ended_at = None

    def tick(self, now: float, speaking: bool) -> Action | None:
        """Called as audio arrives (`speaking`: the latest audio is voiced, not the silence
        before an end): confirms long speech, gives up on a verdict that never came."""
        if not self.paused:
            return None
        assert self._onset is not None and self._paused_at is not None
        held = now - self._onset + 1e-9
        if speaking and self._end is None:
            if self.words is None and held >= self.confirm_ms / 1000:
                return self._decide("interrupt")
            if self.words is not None and held >= self.max_hold_ms / 1000:
                return self._decide("interrupt")
        waited = now - (self._paused_at if self._ended_at is None else self._ended_at)
        # With words, held speech in a gap between its words is not over: its VAD end (or
        # `max_hold_ms`) decides, not a slow transcript (seen under load: a question resumed).
        over = self._end is not None or (not speaking and self.words is None)
        if waited + 1e-9 >= self.resume_after_ms / 1000 and over:
            if self._end is None or self._class in ("backchannel", "echo"):
                return self._decide("resume")
            return self._decide(self._by_length())
        return None

    def speech_ended(self, now: float, end: float | None = None) -> Action | None:
        """The VAD's end of the speech (decided at `now`, after its silence window; the speech
        itself ended at `end`). By length alone, decided here; with words, the final transcript
        (`heard(..., final=True)`) decides."""
        if not self.paused:
            return None
        self._end = now if end is None else end
        if self.words is None:
            return self._decide(self._by_length())
        self._ended_at = now
        return None

    def heard(self, text: str | None, playing: str = "", final: bool = False) -> Action | None:
        """A transcript of the held speech so far (`final`: all of it, after its end; None: the
        ASR failed). `playing`: the text of the reply's sentence(s) the device is playing."""
        if not self.paused or self.words is None:
            return None
        verdict: Heard = "unsure" if text is None else self.words.classify(text, playing, final)
        self._class, self.heard_as = verdict, (text or "", verdict)
        if verdict in ("command", "new"):
            return self._decide("interrupt")
        if verdict == "echo":
            return self._decide("resume")
        if final and self._end is not None:
            return self._decide(self._by_length() if verdict == "unsure" else "resume")
        return None

    def _by_length(self) -> Action:
        assert self._onset is not None and self._end is not None
        return "interrupt" if self._end - self._onset + 1e-9 >= self.confirm_ms / 1000 else "resume"

    def _decide(self, action: Action) -> Action:
        if action == "interrupt":
            self.counts.real += 1
        else:
            self.counts.false += 1
        self._paused_at = self._onset = self._end = self._ended_at = None
        self._class = None
        return action


def interruption_arbiter(vad: VADConfig) -> InterruptionArbiter:
    """The arbiter the `vad.barge_in_*` keys describe."""
    words = None
    if vad.barge_in_words:
        words = WordRules(
            commands=COMMANDS if vad.barge_in_commands is None else vad.barge_in_commands,
            backchannels=BACKCHANNELS if vad.barge_in_backchannels is None else vad.barge_in_backchannels,
            min_words=vad.barge_in_min_words,
        )
    return InterruptionArbiter(confirm_ms=vad.barge_in_confirm_ms, words=words, max_hold_ms=vad.barge_in_max_hold_ms)
