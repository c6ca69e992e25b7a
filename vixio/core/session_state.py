"""Per-session conversation state, shared by the session, its stations and its transport."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(slots=True)
class Message:
    """One entry of the conversation history."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    interrupted: bool = False
    """True when the user cut the reply off; `content` then holds only what was heard."""
    turn_id: int = 0


@dataclass(slots=True)
class TurnMetrics:
    """When each step of one turn happened (`time.monotonic()`), for latency figures."""

    turn_id: int
    marks: dict[str, float] = field(default_factory=dict)
    notes: dict[str, float | str] = field(default_factory=dict)
    """What is not a moment: time saved by a preemptive start, attempts cancelled, which signal
    confirmed the turn (shown beside the marks)."""

    def mark(self, name: str, at: float | None = None) -> None:
        """Record `name` once; later marks of the same name are ignored (first wins)."""
        self.marks.setdefault(name, time.monotonic() if at is None else at)

    def remark(self, name: str, at: float | None = None) -> None:
        """Record `name` again, replacing an earlier one (a preemptive attempt that replaced a
        cancelled one)."""
        self.marks[name] = time.monotonic() if at is None else at

    def durations(self) -> dict[str, float]:
        """Milliseconds from the first mark to every other mark, in time order."""
        if not self.marks:
            return {}
        ordered = sorted(self.marks.items(), key=lambda item: item[1])
        origin = ordered[0][1]
        return {name: round((at - origin) * 1000, 1) for name, at in ordered}


@dataclass(frozen=True, slots=True)
class SpeakerMatch:
    """Who spoke one utterance, as the voiceprints tell (vixio/stations/asr/speaker_id.py)."""

    person: str
    """The enrolled name, or "" for a voice none of the device's voiceprints matches."""
    score: float
    """Cosine similarity to the closest voiceprint (0 without any)."""
    embedding: Any = None
    """The utterance's unit vector (numpy float32), for an enrolment under way."""


@dataclass(slots=True)
class SessionState:
    """What belongs to one conversation rather than to one station."""

    history: list[Message] = field(default_factory=list)
    max_history: int = 40
    """Messages kept; the oldest go first (0 keeps everything)."""
    tools: list[Any] = field(default_factory=list)
    """The tools the agent of this session may use (device, local and MCP tools)."""
    device: dict[str, Any] = field(default_factory=dict)
    """What the transport knows of the device: ids, protocol version, features."""
    bot_speaking: bool = False
    """True from the first audio of a reply until the device was told to stop (barge-in needs it)."""
    heard: list[str] = field(default_factory=list)
    """Sentences of the current reply that reached the device, in order (`hear` adds one)."""
    on_heard: Callable[[], None] | None = None
    """Called after each sentence added to `heard` (the agent stores the reply so far)."""
    reply_control: Callable[[str], None] | None = None
    """Set by the transport: "pause" holds the reply being played (`tts stop`, the rest kept),
    "resume" plays the rest; the VAD station calls it on speech over the reply (InterruptionArbiter)."""
    interruptions: dict[str, int] = field(default_factory=lambda: {"real": 0, "false": 0})
    """Speech over a reply judged a barge-in ("real") or not ("false": the reply resumed)."""
    echo_erle_db: float | None = None
    """Server-side echo cancellation's echo return loss enhancement so far (AEC devices only)."""
    audio_until: float = 0.0
    """`time.monotonic()` at which the reply audio made so far ends if played from when it was made
    (the TTS station keeps it; the agent bounds a reply's silence with it)."""
    turns: deque[TurnMetrics] = field(default_factory=lambda: deque(maxlen=50))
    """Latency marks of the recent turns, newest last."""
    speaker: SpeakerMatch | None = None
    """Who spoke the current turn (set before its text goes on); None: not identified (off, or no audio)."""

    @property
    def person(self) -> str:
        """The memory owner key of the current turn: the recognised person, "" for the household."""
        return self.speaker.person if self.speaker is not None else ""

    def hear(self, sentence: str) -> None:
        """A sentence of the current reply reached the device."""
        self.heard.append(sentence)
        if self.on_heard is not None:
            self.on_heard()

    def add_message(self, message: Message) -> None:
        self.history.append(message)
        if self.max_history and len(self.history) > self.max_history:
            del self.history[: len(self.history) - self.max_history]

    def metrics(self, turn_id: int) -> TurnMetrics:
        """The metrics of `turn_id`, created on first use."""
        for turn in reversed(self.turns):
            if turn.turn_id == turn_id:
                return turn
        turn = TurnMetrics(turn_id)
        self.turns.append(turn)
        return turn
