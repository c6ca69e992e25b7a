"""Microphone frames handled as websockets parses them, without a reader task's step each.

websockets' asyncio connection puts every message it parses into a queue (its `Assembler`) and
wakes the task waiting in `recv()`; that task then decodes the message and hands it on. For an
uplink Opus frame, 16 a second per device, that is one task step, one future and the queue's
bookkeeping per frame: ~20 µs of CPU of ~85 per message in a bare websockets server on the 2-core
EPYC where vixio's figures are measured (100 connections each sending 16.7 binary messages a
second, alternating runs), and a loop iteration of delay before the VAD sees the frame.

`DirectConnection` gives a binary message to the session's `receiver` as soon as it is parsed,
when that is exactly what the reader would do next: the reader waits in `recv()` (`parked`) and
nothing it has not taken yet is queued (`queued`, counted here), so no earlier message can be
overtaken. The receiver returns False for a message it cannot finish without waiting (the
session's read queue is full, a frame that closes the connection); that message, and every one
after it until the reader has caught up, takes websockets' own way. Text messages (JSON: hello,
listen, abort, MCP) always do: websockets checks their UTF-8, and they are few.

This overrides `Connection.process_event`, which websockets documents as the method its
subclasses override (the server's handshake does); `serve(create_connection=...)` is the
documented way in. The message counting assumes websockets 13–16's framing: one `recv()` result
per data frame with `fin` set. Where `process_event` or the frame fields are missing, the plain
`ServerConnection` is used and every message goes through `recv()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger
from websockets.asyncio.server import ServerConnection
from websockets.frames import DATA_OPCODES, Frame, Opcode

Receiver = Callable[[bytes], bool]
"""Takes one binary message at once: True when handled, False to leave it to `recv()`."""

_AVAILABLE = hasattr(ServerConnection, "process_event") and all(
    name in getattr(Frame, "__dataclass_fields__", {}) for name in ("opcode", "data", "fin"))


class DirectConnection(ServerConnection):
    """A server connection that hands binary messages to `receiver` while its reader idles."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.receiver: Receiver | None = None
        self.parked = False
        """The session's reader is waiting in `recv()`."""
        self.queued = 0
        """Messages given to websockets' queue that the reader has not returned from `recv()` yet."""
        self.direct = 0
        """Messages handed to `receiver` (for tests and diagnostics)."""

    def process_event(self, event: Any) -> None:
        if (self.request is not None and isinstance(event, Frame) and event.opcode in DATA_OPCODES
                and self._give(event)):
            return
        super().process_event(event)

    def _give(self, frame: Frame) -> bool:
        """True when `receiver` took `frame`; False after counting it as queued for `recv()`."""
        if (frame.opcode is Opcode.BINARY and frame.fin and self.parked and not self.queued
                and self.receiver is not None):
            try:
                taken = self.receiver(bytes(frame.data))
            except Exception:  # the reader meets it again, in its own task, as without this path
                logger.opt(exception=True).debug("a direct receiver failed; the message goes through recv()")
                taken = False
            if taken:
                self.direct += 1
                return True
        if frame.fin:
            self.queued += 1
        return False

    async def recv(self, decode: bool | None = None) -> Any:
        """`Connection.recv`, noting that the reader waits (so binary messages parsed meanwhile
        may go to `receiver`) and counting the message it returns off `queued`."""
        self.parked = True
        try:
            message = await super().recv(decode)
        finally:
            self.parked = False
        self.queued = max(0, self.queued - 1)
        return message


def connection_class() -> type[ServerConnection]:
    """`DirectConnection` where this websockets version has what it needs, else the plain class."""
    if not _AVAILABLE:
        logger.info("this websockets version lacks what vixio hands microphone frames over with: "
                    "each goes through recv()")
        return ServerConnection
    return DirectConnection
