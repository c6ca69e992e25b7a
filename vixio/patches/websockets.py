"""websockets' asyncio connection, made cheaper per audio frame: frames handed over as parsed,
and several messages written in one socket write. Checked on websockets 15 and 16.

**Uplink** (`DirectConnection`, `connection_class`): ~20 µs of CPU of ~85 per binary message, and
a loop iteration of delay before the VAD sees a microphone frame. It overrides
`Connection.process_event` (documented as the method subclasses override) and counts messages
assuming one `recv()` result per data frame with `fin` set. Upstream would need a documented
per-message callback on the connection (instead of the queue and a `recv()` step per message).

**Downlink** (`send_together`, `can_send_now`, `send_now`): 0.50 send() calls per downlink frame
instead of 1.04, ~6 % less server CPU per frame at 100 sessions. It uses `send_context`,
`send_in_progress`, `protocol.data_to_send` and `transport`. Upstream would need a public
`send_many(messages)` on the asyncio connection.

**Adoption** (`protocol_factory`): a worker process serves a socket its supervisor accepted
through the server's per-connection factory, `asyncio.Server._protocol_factory`. That is a read
vixio cannot run without (no documented way to hand a websockets server an accepted socket), so
`VIXIO_NO_PATCHES` does not remove it; the shape test does watch it.

With `VIXIO_NO_PATCHES=1` or another websockets version, every message goes through `recv()` and
`send()` as websockets does it. The measurements behind each part are in its section below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from loguru import logger
from websockets.asyncio.connection import Connection
from websockets.asyncio.server import Server, ServerConnection
from websockets.frames import DATA_OPCODES, Frame, Opcode
from websockets.protocol import Protocol, State

from vixio.patches import allowed

DISTRIBUTION = "websockets"
CHECKED = ("15.", "16.")
"""websockets versions checked (prefixes)."""


def protocol_factory(server: Server) -> Callable[[], Any]:
    """The listening server's per-connection protocol factory (see **Adoption** above)."""
    return server.server._protocol_factory  # type: ignore[attr-defined,no-any-return]


# --- Uplink --------------------------------------------------------------------------------------
# Microphone frames handled as websockets parses them, without a reader task's step each.
#
# websockets' asyncio connection puts every message it parses into a queue (its `Assembler`) and
# wakes the task waiting in `recv()`; that task then decodes the message and hands it on. For an
# uplink Opus frame, 16 a second per device, that is one task step, one future and the queue's
# bookkeeping per frame: ~20 µs of CPU of ~85 per message in a bare websockets server on the 2-core
# EPYC where vixio's figures are measured (100 connections each sending 16.7 binary messages a
# second, alternating runs), and a loop iteration of delay before the VAD sees the frame.
#
# `DirectConnection` gives a binary message to the session's `receiver` as soon as it is parsed,
# when that is exactly what the reader would do next: the reader waits in `recv()` (`parked`) and
# nothing it has not taken yet is queued (`queued`, counted here), so no earlier message can be
# overtaken. The receiver returns False for a message it cannot finish without waiting (the
# session's read queue is full, a frame that closes the connection); that message, and every one
# after it until the reader has caught up, takes websockets' own way. Text messages (JSON: hello,
# listen, abort, MCP) always do: websockets checks their UTF-8, and they are few.
#
# This overrides `Connection.process_event`, which websockets documents as the method its
# subclasses override (the server's handshake does); `serve(create_connection=...)` is the
# documented way in. The message counting assumes websockets 13–16's framing: one `recv()` result
# per data frame with `fin` set. Where `process_event` or the frame fields are missing, the plain
# `ServerConnection` is used and every message goes through `recv()`.

Receiver = Callable[[bytes], bool]
"""Takes one binary message at once: True when handled, False to leave it to `recv()`."""

_AVAILABLE = hasattr(ServerConnection, "process_event") and all(
    name in getattr(Frame, "__dataclass_fields__", {}) for name in ("opcode", "data", "fin")
)


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
        if self.request is not None and isinstance(event, Frame) and event.opcode in DATA_OPCODES and self._give(event):
            return
        super().process_event(event)

    def _give(self, frame: Frame) -> bool:
        """True when `receiver` took `frame`; False after counting it as queued for `recv()`."""
        if (
            frame.opcode is Opcode.BINARY
            and frame.fin
            and self.parked
            and not self.queued
            and self.receiver is not None
        ):
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
    """`DirectConnection` where this websockets version has what it needs (and patches are
    allowed), else the plain class."""
    if not allowed(DISTRIBUTION, CHECKED, "microphone frames (each goes through recv())"):
        return ServerConnection
    if not _AVAILABLE:
        logger.info(
            "this websockets version lacks what vixio hands microphone frames over with: each goes through recv()"
        )
        return ServerConnection
    return DirectConnection


# --- Downlink ------------------------------------------------------------------------------------
# Several WebSocket messages in one socket write (websockets' asyncio connection).
#
# `Connection.send` writes each message with its own `transport.write`: one send() syscall per
# message. The downlink pacer releases Opus frames four at a time (a pre-buffer more), so
# `send_together` frames them all inside one `send_context()` — the same open-state check, close
# handling and flow control (drain above the write buffer's high-water mark) as `send`, and no
# await between the frames, so no other sender on the connection gets between them — and writes
# their bytes with one `transport.writelines`. At 100 sessions receiving speech, when frames went
# two at a time: 0.50 send() calls per downlink frame instead of 1.04, ~6 % less server CPU per frame.
#
# `send_now` goes further when nothing stands in the way (the connection open, no fragmented
# message going out, nothing waiting in the socket's write buffer, so there is no flow control to
# wait for): it frames the messages and writes them at once, without a coroutine, so the caller
# (the transport's `write`, with an empty write queue) needs no writer task step in between.
#
# That uses websockets internals (`send_context`, `send_in_progress`, `protocol.data_to_send`,
# `transport`); where they are missing each message goes through plain `send`.

_CLASS_API = hasattr(Connection, "send_context") and all(
    hasattr(Protocol, name) for name in ("send_binary", "send_text", "data_to_send")
)
_INSTANCE_API = ("protocol", "transport", "send_in_progress")
_batching: bool | None = None
"""Whether `send_together` writes messages together; decided on the first connection it sees."""


def batching_available(connection: Connection) -> bool:
    """Whether `send_together` and `send_now` may use websockets' internals (decided once)."""
    global _batching
    if _batching is None:
        _batching = False
        if allowed(DISTRIBUTION, CHECKED, "downlink writes (one socket write per message)"):
            _batching = _CLASS_API and all(hasattr(connection, name) for name in _INSTANCE_API)
            if not _batching:
                logger.info(
                    "this websockets version lacks the internals vixio batches writes with: "
                    "one socket write per downlink message"
                )
    return _batching


async def send_together(connection: Connection, messages: Sequence[bytes | str]) -> None:
    """Send `messages` in order (bytes as binary frames, str as text frames), in one socket
    write when possible; raises websockets' ConnectionClosed like `send`."""
    if len(messages) < 2 or not batching_available(connection):
        for message in messages:
            await connection.send(message)
        return
    while connection.send_in_progress is not None:  # a fragmented message is going out: as `send`
        await asyncio.shield(connection.send_in_progress)
    async with connection.send_context():
        # Only these frames are pending: the state was OPEN on entry and nothing ran since (the
        # end-of-stream marker comes with a close, which websockets flushes at once). Leaving the
        # context writes nothing more, then drains like `send`.
        _frame_and_write(connection, messages)


def can_send_now(connection: Connection) -> bool:
    """Whether `send_now` may write to `connection` at once: open, no fragmented message going
    out, an empty write buffer (nothing for flow control to wait on)."""
    return (
        batching_available(connection)
        and connection.send_in_progress is None
        and connection.protocol.state is State.OPEN
        and not connection.transport.is_closing()
        and connection.transport.get_write_buffer_size() == 0
    )


def send_now(connection: Connection, messages: Sequence[bytes | str]) -> None:
    """Frame `messages` and write them in one socket write; only right after `can_send_now`."""
    _frame_and_write(connection, messages)


def _frame_and_write(connection: Connection, messages: Sequence[bytes | str]) -> None:
    """Bytes as binary frames, str as text frames, all written with one `writelines`."""
    protocol = connection.protocol
    for message in messages:
        if isinstance(message, str):
            protocol.send_text(message.encode())
        else:
            protocol.send_binary(message)
    connection.transport.writelines(protocol.data_to_send())
