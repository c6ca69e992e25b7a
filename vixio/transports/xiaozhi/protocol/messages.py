"""The Xiaozhi WebSocket protocol: message types, builders and chunk mapping.

Text frames are JSON objects with a string `type`; binary frames are Opus, bare (protocol v1)
or behind a v2/v3 header (see framing.py). Messages the firmware sends: hello, listen
(start/stop/detect), abort, mcp. Messages it understands: hello, stt, llm, tts
(start/sentence_start/stop), mcp, system, alert, custom, and binary audio.

A text frame that is a bare JSON-RPC 2.0 object (`{"jsonrpc": "2.0", ...}` without a `type`,
as `mcp/registerTools` clients may send) decodes to an `mcp` message marked
`"envelope": "bare"`; encoding such a message writes the bare payload again.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from vixio.core.chunk import Chunk, TextChunk
from vixio.core.json_limits import DEFAULT_MAX_DEPTH, JsonTooDeep, check_depth
from vixio.core.protocol import FrameRefused, Message, ProtocolBase, ProtocolError
from vixio.transports.xiaozhi.protocol.codec import DOWNLINK_SAMPLE_RATE, FRAME_DURATION_MS
from vixio.transports.xiaozhi.protocol.framing import SUPPORTED_VERSIONS, FramingError, pack, unpack

_SURROGATES = re.compile("[\ud800-\udfff]")
"""UTF-16 surrogate code points: a str may hold them, UTF-8 (and so a WebSocket text frame) cannot."""

AUDIO = "audio"
"""Type of the message dict a binary frame decodes to: {"type": "audio", "data": opus}."""
MCP = "mcp"
ENVELOPE = "envelope"
"""Key marking an `mcp` message that travels as a bare JSON-RPC frame: {"envelope": "bare"}."""

LISTEN_MODES = ("auto", "manual", "realtime")
MAX_TYPED_TEXT = 2000
"""Longest `listen detect` text taken as a typed utterance (a wake word is a few characters)."""
TEXT_TOO_LONG = {
    "en": "That message is too long for me: I take at most 2,000 characters. Please send a shorter one.",
    "zh": "这条消息太长了，我最多只能读两千个字。请发短一点的。",
}
"""Said to a device whose typed text was past `MAX_TYPED_TEXT` (a silent drop left the user waiting)."""

# The firmware shows emotions from this vocabulary (FW Application::OnIncomingJson, XS displays).
EMOTIONS = (
    "neutral",
    "happy",
    "laughing",
    "funny",
    "sad",
    "angry",
    "crying",
    "loving",
    "embarrassed",
    "surprised",
    "shocked",
    "thinking",
    "winking",
    "cool",
    "relaxed",
    "delicious",
    "kissy",
    "confident",
    "sleepy",
    "silly",
    "confused",
)

# Emoji and other pictographs: the device's subtitle font has none of them.
_PICTOGRAPHS = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U0001f900-\U0001f9ff\U00002b00-\U00002bff\ufe0f\u200d]"
)


class XiaozhiProtocol(ProtocolBase):
    """Stateless translation for one binary protocol version (1, 2 or 3)."""

    def __init__(self, binary_version: int = 1, *, max_json_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if binary_version not in SUPPORTED_VERSIONS:
            raise ValueError(f"binary protocol version must be one of {SUPPORTED_VERSIONS}, got {binary_version}")
        self.binary_version = binary_version
        self.max_json_depth = max_json_depth
        """Text frames nested deeper are refused and close the connection (1008)."""

    def decode(self, data: bytes | str) -> Message:
        if isinstance(data, (bytes, bytearray, memoryview)):
            try:
                frame = unpack(bytes(data), self.binary_version)
            except FramingError as exc:
                raise ProtocolError(f"bad binary frame (protocol v{self.binary_version}): {exc}") from exc
            return {"type": AUDIO, "data": frame.payload, "timestamp_ms": frame.timestamp_ms}
        try:
            check_depth(data, self.max_json_depth)
            message = json.loads(data)
        except JsonTooDeep as exc:
            raise FrameRefused(f"text frame refused: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(f"text frame is not JSON: {_excerpt(data)}") from exc
        if isinstance(message, dict) and "type" not in message and message.get("jsonrpc") == "2.0":
            return mcp(message, "bare")
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise ProtocolError(f"text frame is not an object with a string type: {_excerpt(data)}")
        if message["type"] == AUDIO:
            # "audio" is what a binary frame decodes to; a text frame claiming it carries no Opus.
            raise ProtocolError(f"text frame of type 'audio' (audio travels in binary frames): {_excerpt(data)}")
        text = message.get("text")
        if message["type"] == "listen" and isinstance(text, str) and len(text) > MAX_TYPED_TEXT:
            # Typed text becomes a user turn the model reads: a megabyte "utterance" would be a
            # megabyte prompt on every following turn. The text goes; the connection tells the
            # user why (TEXT_TOO_LONG), in the language the text began in.
            zh = any("\u4e00" <= c <= "\u9fff" for c in text[:200])
            return {
                "type": "listen",
                "state": message.get("state"),
                "too_long": len(text),
                "language": "zh" if zh else "en",
            }
        return message

    def encode(self, message: Message) -> bytes | str:
        if message.get("type") == AUDIO:
            return pack(message["data"], self.binary_version, timestamp_ms=message.get("timestamp_ms", 0))
        if message.get("type") == MCP and message.get(ENVELOPE) == "bare":
            message = message["payload"]
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        if text.isascii():  # a flag CPython keeps: most messages cost nothing more
            return text
        try:
            text.encode()
        except UnicodeEncodeError:
            # A lone surrogate (a device's own "\ud800" escape, echoed in `stt`) is not UTF-8: a
            # text frame cannot carry it (websockets would drop the connection). Sent as U+FFFD.
            text = _SURROGATES.sub("\ufffd", text)
        return text

    def message_to_chunk(self, message: Message, session_id: str, turn_id: int) -> Chunk | None:
        """A typed utterance (`listen detect` with text) becomes user text; audio is decoded by the
        connection (the Opus decoder is per session), everything else is control, not data."""
        if message.get("type") == "listen" and message.get("state") == "detect":
            text = message.get("text")
            if isinstance(text, str) and text.strip():
                return TextChunk(text=text.strip(), role="user", session_id=session_id, turn_id=turn_id)
        return None

    def chunk_to_messages(self, chunk: Chunk) -> list[Message]:
        """User text → `stt`; assistant text → `tts sentence_start` (the subtitle of what is spoken)."""
        if isinstance(chunk, TextChunk):
            if chunk.role == "user":
                return [stt(chunk.text)]
            subtitle = clean_subtitle(chunk.text)
            return [tts("sentence_start", subtitle)] if subtitle else []
        return []


# --- builders (server → device) ----------------------------------------------------------------


def server_hello(session_id: str, version: int) -> Message:
    # `transport` is mandatory: the firmware dereferences it without a null check.
    # xiaozhi-sdk needs every audio_params key, so all are always sent.
    return {
        "type": "hello",
        "version": version,
        "transport": "websocket",
        "session_id": session_id,
        "audio_params": {
            "format": "opus",
            "sample_rate": DOWNLINK_SAMPLE_RATE,
            "channels": 1,
            "frame_duration": FRAME_DURATION_MS,
        },
    }


def stt(text: str) -> Message:
    return {"type": "stt", "text": text}


def tts(state: str, text: str | None = None) -> Message:
    message: Message = {"type": "tts", "state": state}
    if text is not None:
        message["text"] = text
    return message


def llm_emotion(emotion: str, text: str = "") -> Message:
    if emotion not in EMOTIONS:
        raise ValueError(f"unknown emotion {emotion!r}; the device knows {', '.join(EMOTIONS)}")
    return {"type": "llm", "emotion": emotion, "text": text}


def system(command: str = "reboot") -> Message:
    return {"type": "system", "command": command}


def alert(status: str, message: str, emotion: str = "neutral") -> Message:
    # The firmware ignores an alert unless all three are strings.
    return {"type": "alert", "status": str(status), "message": str(message), "emotion": str(emotion)}


def mcp(payload: dict[str, Any], envelope: str = "mcp") -> Message:
    """A JSON-RPC payload for the wire: wrapped in `{"type": "mcp"}`, or bare when the client
    speaks bare JSON-RPC (envelope "bare")."""
    message: Message = {"type": MCP, "payload": payload}
    if envelope == "bare":
        message[ENVELOPE] = "bare"
    return message


def mcp_envelope(message: Message) -> Literal["mcp", "bare"]:
    """How an `mcp` message came in: "bare" or "mcp"."""
    return "bare" if message.get(ENVELOPE) == "bare" else "mcp"


def custom(payload: dict[str, Any]) -> Message:
    return {"type": "custom", "payload": payload}


def audio(opus: bytes, timestamp_ms: int = 0) -> Message:
    return {"type": AUDIO, "data": opus, "timestamp_ms": timestamp_ms}


def clean_subtitle(text: str) -> str:
    """What the device can show: no emoji, no line breaks, no surrounding blanks."""
    return " ".join(_PICTOGRAPHS.sub("", text).split())


def _excerpt(data: str | bytes, limit: int = 80) -> str:
    text = data if isinstance(data, str) else repr(data)
    return repr(text[:limit] + ("…" if len(text) > limit else ""))
