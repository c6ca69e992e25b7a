"""The core: chunks, stations, pipeline, session, protocol and transport bases.

Depends on nothing else in vixio and on no agent framework or service SDK.
"""

from vixio.core.chunk import (
    AudioChunk,
    BaseChunk,
    BotStartedSpeakingChunk,
    BotStoppedSpeakingChunk,
    Chunk,
    EmotionChunk,
    ErrorChunk,
    InterruptChunk,
    MetricsChunk,
    StreamCompleteChunk,
    TextChunk,
    TextDeltaChunk,
    ThoughtChunk,
    ToolCallChunk,
    ToolResultChunk,
    TurnEndChunk,
    TurnStartChunk,
    VADEndChunk,
    VADStartChunk,
)
from vixio.core.pipeline import Pipeline
from vixio.core.protocol import Message, ProtocolBase, ProtocolError
from vixio.core.queue import ChunkQueue
from vixio.core.session import Session, SessionState
from vixio.core.station import Station
from vixio.core.transport import ConnectionClosed, TransportBase

__all__ = [
    "AudioChunk",
    "BaseChunk",
    "BotStartedSpeakingChunk",
    "BotStoppedSpeakingChunk",
    "Chunk",
    "ChunkQueue",
    "ConnectionClosed",
    "EmotionChunk",
    "ErrorChunk",
    "InterruptChunk",
    "Message",
    "MetricsChunk",
    "Pipeline",
    "ProtocolBase",
    "ProtocolError",
    "Session",
    "SessionState",
    "Station",
    "StreamCompleteChunk",
    "TextChunk",
    "ThoughtChunk",
    "TextDeltaChunk",
    "ToolCallChunk",
    "ToolResultChunk",
    "TransportBase",
    "TurnEndChunk",
    "TurnStartChunk",
    "VADEndChunk",
    "VADStartChunk",
]
