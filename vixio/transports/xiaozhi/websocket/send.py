"""Several WebSocket messages in one socket write (websockets' asyncio connection).

`Connection.send` writes each message with its own `transport.write`: one send() syscall per
message. The downlink pacer releases Opus frames four at a time (a pre-buffer more), so
`send_together` frames them all inside one `send_context()` — the same open-state check, close
handling and flow control (drain above the write buffer's high-water mark) as `send`, and no
await between the frames, so no other sender on the connection gets between them — and writes
their bytes with one `transport.writelines`. At 100 sessions receiving speech, when frames went
two at a time: 0.50 send() calls per downlink frame instead of 1.04, ~6 % less server CPU per frame.

`send_now` goes further when nothing stands in the way (the connection open, no fragmented
message going out, nothing waiting in the socket's write buffer, so there is no flow control to
wait for): it frames the messages and writes them at once, without a coroutine, so the caller
(the transport's `write`, with an empty write queue) needs no writer task step in between.

That uses websockets internals (`send_context`, `send_in_progress`, `protocol.data_to_send`,
`transport`); where they are missing each message goes through plain `send`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from loguru import logger
from websockets.asyncio.connection import Connection
from websockets.protocol import Protocol, State

_CLASS_API = hasattr(Connection, "send_context") and all(
    hasattr(Protocol, name) for name in ("send_binary", "send_text", "data_to_send"))
_INSTANCE_API = ("protocol", "transport", "send_in_progress")
_batching: bool | None = None
"""Whether `send_together` writes messages together; decided on the first connection it sees."""


def batching_available(connection: Connection) -> bool:
    global _batching
    if _batching is None:
        _batching = _CLASS_API and all(hasattr(connection, name) for name in _INSTANCE_API)
        if not _batching:
            logger.info("this websockets version lacks the internals vixio batches writes with: "
                        "one socket write per downlink message")
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
    return (batching_available(connection) and connection.send_in_progress is None
            and connection.protocol.state is State.OPEN and not connection.transport.is_closing()
            and connection.transport.get_write_buffer_size() == 0)


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
