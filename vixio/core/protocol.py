"""ProtocolBase: how a transport's wire messages map to chunks and back.

A protocol is pure translation (no I/O): `decode`/`encode` between the wire and message dicts,
`message_to_chunk`/`chunk_to_messages` between message dicts and pipeline chunks. MCP messages
are not chunks: they bypass the pipeline to the session's device tool client (docs/tool-systems.md §1.4), so
the protocol only wraps and unwraps them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from vixio.core.chunk import Chunk

Message = dict[str, Any]
"""A decoded wire message, e.g. {"type": "listen", "state": "start"} or {"type": "audio", ...}."""


class ProtocolError(ValueError):
    """A frame that cannot be decoded; the transport logs it with the device id and drops it."""


class FrameRefused(ProtocolError):
    """A frame the server will not take at all (e.g. JSON nested too deep): the transport logs it
    once and closes the connection with `close_code` and the message as the close reason."""

    def __init__(self, message: str, close_code: int = 1008) -> None:
        super().__init__(message)
        self.close_code = close_code
        """WebSocket close code: 1008 policy violation, 1009 message too big."""


class ProtocolBase(ABC):
    """Translation between a transport's wire format, message dicts and chunks."""

    MCP_TYPE = "mcp"

    @abstractmethod
    def decode(self, data: bytes | str) -> Message:
        """Wire frame → message dict; raises ProtocolError on malformed input."""

    @abstractmethod
    def encode(self, message: Message) -> bytes | str:
        """Message dict → wire frame."""

    @abstractmethod
    def message_to_chunk(self, message: Message, session_id: str, turn_id: int) -> Chunk | None:
        """Message from the device → chunk for the pipeline, or None if it is not pipeline data."""

    @abstractmethod
    def chunk_to_messages(self, chunk: Chunk) -> list[Message]:
        """Chunk out of the pipeline → messages for the device (possibly none)."""

    # --- MCP (bypasses the pipeline) -----------------------------------------------------------

    def create_mcp_message(self, payload: dict[str, Any]) -> Message:
        """Wrap a JSON-RPC 2.0 payload for the wire."""
        return {"type": self.MCP_TYPE, "payload": payload}

    def is_mcp_message(self, message: Message) -> bool:
        return message.get("type") == self.MCP_TYPE

    def get_mcp_payload(self, message: Message) -> dict[str, Any] | None:
        """The JSON-RPC payload of an MCP message, or None if it has none."""
        if not self.is_mcp_message(message):
            return None
        payload = message.get("payload")
        return payload if isinstance(payload, dict) else None
