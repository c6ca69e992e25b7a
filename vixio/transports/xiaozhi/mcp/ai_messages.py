"""What a `mcp/registerTools` client hears from the server besides calls (docs/tool-systems.md §3): the
assistant's output as `mcp/ai/message` notifications, and `mcp/pairing` when an operator
changes its pairing.

- server → client notification `mcp/ai/message` `{type: chunk | thought | final, content}`:
  `chunk`s concatenated in order equal the reply's `final` exactly;
- server → companion notification `mcp/pairing` `{status, paired, mac_addr, pairing_id, message}`.

A device session's client streams to its paired companions as well (pairing.py). The client
itself (registration, calls) is register_tools.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Literal

from vixio.core.chunk import (
    Chunk,
    InterruptChunk,
    StreamCompleteChunk,
    TextChunk,
    ThoughtChunk,
)
from vixio.core.transport import ConnectionClosed

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.companions.pairing import PairingOutcome
    from vixio.transports.xiaozhi.companions.relay import RemoteCompanion
    from vixio.transports.xiaozhi.mcp.register_tools import Envelope, RegisterToolsClient, SendPayload

AI_MESSAGE_METHOD = "mcp/ai/message"
PAIRING_METHOD = "mcp/pairing"
"""Server → companion notification when its pairing changes after the registration's answer."""

AiMessageType = Literal["chunk", "thought", "final"]


class AiMessageStream:
    """The output half of RegisterToolsClient: the assistant's reply streamed to the client (and
    its companions) once it has registered."""

    registered: bool
    companions: list[RegisterToolsClient | RemoteCompanion]
    mac_addr: str
    envelope: Envelope
    _send: SendPayload
    _reply: list[str]
    """The `chunk` fragments sent for the reply in progress."""
    _reply_open: bool
    _closed: bool
    _spawn: Callable[[Awaitable[None]], None]

    async def send_notification(self, message: dict[str, Any]) -> None:
        await self._send(message, self.envelope)

    async def on_output(self, chunk: Chunk) -> None:
        """Pipeline output → `mcp/ai/message` (docs/tool-systems.md §3): `chunk`s are stream fragments that,
        concatenated in order, equal the reply's `final` exactly (a space between Latin-script
        sentences travels with the later one); `thought` for reasoning; a `final` closes every
        reply — when it completes or is interrupted — and is empty when nothing was said."""
        if self._closed or not (self.registered or self.companions):
            return
        if isinstance(chunk, TextChunk):
            text = chunk.text.strip()
            if chunk.role == "user":
                self._reply_open = True  # a reply is owed to this user turn, even an empty one
            elif chunk.role == "assistant" and text:
                fragment = sentence_separator(self._reply[-1] if self._reply else "", text) + text
                self._reply.append(fragment)
                self._reply_open = True
                await self._notify("chunk", fragment)
        elif isinstance(chunk, ThoughtChunk):
            if chunk.text.strip():
                self._reply_open = True
                await self._notify("thought", chunk.text)
        elif isinstance(chunk, StreamCompleteChunk | InterruptChunk) and (self._reply_open or self._reply):
            # An interrupted reply is closed with what was sent, so a client's bubble never dangles.
            reply, self._reply, self._reply_open = "".join(self._reply), [], False
            await self._notify("final", reply)

    def notify_pairing(self, outcome: PairingOutcome) -> None:
        """Tell the companion its pairing changed (an operator approved or unpaired it)."""
        if self._closed:
            return
        message = {
            "jsonrpc": "2.0",
            "method": PAIRING_METHOD,
            "params": {
                "status": outcome.status,
                "paired": outcome.paired,
                "mac_addr": self.mac_addr,
                "pairing_id": outcome.pairing_id,
                "message": outcome.message,
            },
        }
        self._spawn(self._send(message, self.envelope))

    async def _notify(self, kind: AiMessageType, content: str) -> None:
        message = {"jsonrpc": "2.0", "method": AI_MESSAGE_METHOD, "params": {"type": kind, "content": content}}
        targets: list[AiMessageStream | RemoteCompanion] = [self] if self.registered else []
        targets += self.companions
        for target in targets:
            with suppress(ConnectionClosed):  # that session is ending; the transport cleans up
                await target.send_notification(message)


def sentence_separator(before: str, sentence: str) -> str:
    """What goes between two spoken sentences: a space between Latin-script ones, none for CJK."""
    return " " if before and sentence and before[-1].isascii() and sentence[0].isascii() else ""


def join_sentences(sentences: list[str]) -> str:
    """Sentences back into one reply: a space between Latin-script sentences, none for CJK."""
    out = ""
    for sentence in sentences:
        out += sentence_separator(out, sentence) + sentence
    return out
