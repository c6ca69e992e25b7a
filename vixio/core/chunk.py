"""What flows through a pipeline: small typed chunks with a `kind` discriminator.

Three families:

- **data**: audio, streamed text deltas, final text;
- **control**: interrupt, turn start/end, stream complete;
- **events**: VAD start/end, bot started/stopped speaking, tool call/result, metrics, error.

Every chunk carries the session id and the turn id it belongs to. A chunk created by a station
without them is stamped by the pipeline: the session id of the pipeline and the turn id of the
chunk the station was processing. After an interrupt, chunks of older turns are dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

UNSET_TURN = -1
"""Turn id of a chunk that has not been stamped yet."""


@dataclass(kw_only=True, slots=True)
class BaseChunk:
    """Fields every chunk has."""

    session_id: str = ""
    """The session the chunk belongs to; stamped by the pipeline when empty."""
    turn_id: int = UNSET_TURN
    """The conversation turn the chunk belongs to; stamped by the pipeline when unset."""
    created_at: float = field(default_factory=time.monotonic)
    """`time.monotonic()` when the chunk was made; used for latency metrics."""


# --- data -------------------------------------------------------------------------------------


Role = Literal["user", "assistant"]


@dataclass(kw_only=True, slots=True)
class AudioChunk(BaseChunk):
    """PCM audio, signed 16-bit little-endian, interleaved when `channels` > 1."""

    kind: Literal["audio"] = field(default="audio", init=False)
    pcm: bytes
    """Raw int16 samples."""
    sample_rate: int
    """Samples per second, e.g. 16000 for the uplink, 24000 for the Xiaozhi downlink."""
    channels: int = 1
    role: Role = "user"
    """"user" for microphone audio, "assistant" for speech to play; only the latter is played."""

    @property
    def samples(self) -> np.ndarray:
        """The PCM as an int16 array (a view, no copy)."""
        return np.frombuffer(self.pcm, dtype="<i2")

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return len(self.pcm) / (2 * self.channels * self.sample_rate)


@dataclass(kw_only=True, slots=True)
class TextDeltaChunk(BaseChunk):
    """A piece of streamed text, e.g. an LLM token or a partial transcript."""

    kind: Literal["text_delta"] = field(default="text_delta", init=False)
    text: str
    role: Role = "assistant"
    ends_text: bool = False
    """The text so far is complete (a model call ended): a sentence still buffered is whole."""


@dataclass(kw_only=True, slots=True)
class TextChunk(BaseChunk):
    """Final text: a whole transcript, a whole reply, or one sentence to speak."""

    kind: Literal["text"] = field(default="text", init=False)
    text: str
    role: Role = "assistant"


@dataclass(kw_only=True, slots=True)
class ThoughtChunk(BaseChunk):
    """The model's reasoning (`<think>` content): may be shown, is never spoken."""

    kind: Literal["thought"] = field(default="thought", init=False)
    text: str


# --- control ----------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class InterruptChunk(BaseChunk):
    """Cancel the current turn everywhere.

    Not queued behind data: the pipeline delivers it to every station at once, drops the
    chunks of older turns and starts a new turn. `turn_id` is the *new* turn.
    """

    kind: Literal["interrupt"] = field(default="interrupt", init=False)
    reason: str = ""
    """Why, for logs and metrics: "abort", "barge_in", "wake_word", ..."""


@dataclass(kw_only=True, slots=True)
class TurnStartChunk(BaseChunk):
    """A user turn began (speech started, push-to-talk pressed)."""

    kind: Literal["turn_start"] = field(default="turn_start", init=False)
    source: Literal["vad", "push_to_talk"] = "vad"
    """Who decides the end: the VAD's silence, or the release of a push-to-talk button."""


@dataclass(kw_only=True, slots=True)
class TurnEndChunk(BaseChunk):
    """The user turn ended; stations that buffer the turn flush now."""

    kind: Literal["turn_end"] = field(default="turn_end", init=False)
    source: Literal["vad", "push_to_talk"] = "vad"


@dataclass(kw_only=True, slots=True)
class StreamCompleteChunk(BaseChunk):
    """The producer upstream finished this turn's stream (e.g. the agent's reply is complete)."""

    kind: Literal["stream_complete"] = field(default="stream_complete", init=False)
    source: str = ""
    """Name of the station whose stream completed."""


# --- events -----------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class VADStartChunk(BaseChunk):
    """Voice activity began."""

    kind: Literal["vad_start"] = field(default="vad_start", init=False)


@dataclass(kw_only=True, slots=True)
class VADEndChunk(BaseChunk):
    """Voice activity ended (after the configured minimum silence)."""

    kind: Literal["vad_end"] = field(default="vad_end", init=False)


@dataclass(kw_only=True, slots=True)
class VADPauseChunk(BaseChunk):
    """The user has been silent for `vad.early_silence_ms`: the utterance may be over (a
    preemptive turn starts on what was said so far), or they may go on (`VADResumeChunk`)."""

    kind: Literal["vad_pause"] = field(default="vad_pause", init=False)
    silence_start: int = 0
    """Where the silence began, in samples of the session's VAD stream: names this pause."""


@dataclass(kw_only=True, slots=True)
class VADResumeChunk(BaseChunk):
    """The user spoke again after a `VADPauseChunk`, before the utterance ended."""

    kind: Literal["vad_resume"] = field(default="vad_resume", init=False)


@dataclass(kw_only=True, slots=True)
class EndpointChunk(BaseChunk):
    """What the transcript of a pause says about the utterance, sent back to the VAD (pushed at
    the pipeline's input): "end" it now (evidently complete), or "extend" the silence that ends
    it to `silence_ms` (evidently incomplete). Ignored when the user spoke again since."""

    kind: Literal["endpoint"] = field(default="endpoint", init=False)
    action: Literal["end", "extend"] = "end"
    silence_start: int = 0
    """The pause it is about (`VADPauseChunk.silence_start`)."""
    silence_ms: int = 0
    reason: str = ""
    """Which signal decided (shown in the turn's latency marks)."""


@dataclass(kw_only=True, slots=True)
class DraftTextChunk(BaseChunk):
    """What the user said up to a pause, before the turn is confirmed: the agent may start on
    it but holds its reply (nothing of it reaches the device, the history or a control tool)."""

    kind: Literal["draft_text"] = field(default="draft_text", init=False)
    text: str = ""


@dataclass(kw_only=True, slots=True)
class BotStartedSpeakingChunk(BaseChunk):
    """The first audio of a reply went to the device."""

    kind: Literal["bot_started_speaking"] = field(default="bot_started_speaking", init=False)


@dataclass(kw_only=True, slots=True)
class BotStoppedSpeakingChunk(BaseChunk):
    """The last audio of a reply went to the device, or the reply was interrupted."""

    kind: Literal["bot_stopped_speaking"] = field(default="bot_stopped_speaking", init=False)


@dataclass(kw_only=True, slots=True)
class EmotionChunk(BaseChunk):
    """The emotion of the reply, for the device's face (one per turn)."""

    kind: Literal["emotion"] = field(default="emotion", init=False)
    emotion: str
    """A word of the Xiaozhi vocabulary: neutral, happy, sad, thinking, ..."""
    emoji: str = ""


@dataclass(kw_only=True, slots=True)
class ToolCallChunk(BaseChunk):
    """The agent called a tool."""

    kind: Literal["tool_call"] = field(default="tool_call", init=False)
    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class ToolResultChunk(BaseChunk):
    """A tool call finished."""

    kind: Literal["tool_result"] = field(default="tool_result", init=False)
    call_id: str
    name: str
    result: str
    is_error: bool = False


@dataclass(kw_only=True, slots=True)
class MetricsChunk(BaseChunk):
    """Timings or counters, e.g. {"asr_seconds": 0.31}."""

    kind: Literal["metrics"] = field(default="metrics", init=False)
    values: dict[str, float] = field(default_factory=dict)
    source: str = ""


@dataclass(kw_only=True, slots=True)
class ErrorChunk(BaseChunk):
    """A station failed on a chunk; the pipeline goes on, the session decides what to say."""

    kind: Literal["error"] = field(default="error", init=False)
    source: str
    """Name of the station (or component) that failed."""
    message: str
    exception: BaseException | None = None


Chunk = (
    AudioChunk
    | TextDeltaChunk
    | TextChunk
    | ThoughtChunk
    | InterruptChunk
    | TurnStartChunk
    | TurnEndChunk
    | StreamCompleteChunk
    | VADStartChunk
    | VADEndChunk
    | VADPauseChunk
    | VADResumeChunk
    | EndpointChunk
    | DraftTextChunk
    | BotStartedSpeakingChunk
    | BotStoppedSpeakingChunk
    | EmotionChunk
    | ToolCallChunk
    | ToolResultChunk
    | MetricsChunk
    | ErrorChunk
)
"""Any chunk; match on the class or on `chunk.kind`."""

DATA_CHUNKS = (AudioChunk, TextDeltaChunk, TextChunk, ThoughtChunk)
CONTROL_CHUNKS = (InterruptChunk, TurnStartChunk, TurnEndChunk, StreamCompleteChunk)
EVENT_CHUNKS = (
    VADStartChunk,
    VADEndChunk,
    VADPauseChunk,
    VADResumeChunk,
    EndpointChunk,
    DraftTextChunk,
    BotStartedSpeakingChunk,
    BotStoppedSpeakingChunk,
    EmotionChunk,
    ToolCallChunk,
    ToolResultChunk,
    MetricsChunk,
    ErrorChunk,
)
