"""TransportBase: per-session read/write workers around a concrete connection.

A concrete transport implements `_do_read` / `_do_write` for one session's connection (a
WebSocket, say) and calls `open_session_io` / `close_session_io` around it. The base class:

- decodes every incoming frame with the protocol; a malformed frame is logged with the device
  id and dropped, the session goes on;
- routes MCP messages straight to the session's MCP peer (the device tool client) — they never
  enter the pipeline (docs/tool-systems.md §1.4);
- queues everything else for `read()` (or hands it to the session's inline handler, when
  one is set and nothing waits in that queue), and writes `write()`'s messages from a per-session
  queue, so a slow socket slows its own session only — what is queued together goes to
  `_do_write_batch` together (the pacer's group of audio frames: one socket write). When that
  queue is empty and its writer idle, a transport that can write without waiting
  (`_writer_now`) writes at once instead: no writer task step, no loop iteration between
  `write()` and the socket; `write_many` hands several messages over for one socket write;
- keeps a per-session callback that is told when the device's tools are ready.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.core.protocol import FrameRefused, Message, ProtocolBase, ProtocolError

ToolsReadyCallback = Callable[[list[Any]], Awaitable[None]]
"""Called with the device's tool definitions once they are known (and again when they change)."""
InlineHandler = Callable[[Message], bool]
"""Handles a message at once, without suspending; False: leave it for `read()` (see
`TransportBase.set_inline_handler`)."""
WRITE_BATCH = 16
"""Most messages the write worker takes from a session's queue for one `_do_write_batch` (the
flow-control wait comes after the batch, so this bounds what is written past a full buffer)."""


class McpPeer(Protocol):
    """Receiver of a session's MCP payloads: the device tool client."""

    def on_mcp_message(self, payload: dict[str, Any]) -> None: ...


class SelectiveMcpPeer(McpPeer, Protocol):
    """An extra MCP receiver that takes only the payloads it recognises (e.g. the
    `mcp/registerTools` protocol, or replies to its own request ids)."""

    def accepts(self, payload: dict[str, Any]) -> bool: ...


class ConnectionClosed(Exception):
    """Raised by `_do_read` / `_do_write` when the connection is gone."""


class _SessionIO:
    def __init__(self, session_id: str, device_id: str, queue_size: int) -> None:
        self.reads: asyncio.Queue[Message | None] = asyncio.Queue(queue_size)
        self.writes: asyncio.Queue[Message] = asyncio.Queue(queue_size)
        self.logger = logger.bind(session=session_id, device=device_id or "-")
        self.tasks: list[asyncio.Task[None]] = []
        self.mcp_peer: McpPeer | None = None
        self.extra_mcp_peers: list[SelectiveMcpPeer] = []
        self.tools_ready: ToolsReadyCallback | None = None
        self.inline: InlineHandler | None = None
        self.writing = False
        """The write worker holds messages it took from `writes` and has not written yet."""
        self.bad_frames = LogThrottle(first=5, every=10.0)
        """Malformed frames: the first few are logged, then a count every 10 s."""


class TransportBase(ABC):
    """Base of every transport; see the module docstring for what it does for you."""

    def __init__(self, protocol: ProtocolBase, *, queue_size: int = 64) -> None:
        self.protocol = protocol
        self._queue_size = queue_size
        self._io: dict[str, _SessionIO] = {}

    # --- to implement -------------------------------------------------------------------------

    @abstractmethod
    async def start(self) -> None:
        """Start accepting connections."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop accepting connections and close every session."""

    @abstractmethod
    async def _do_read(self, session_id: str) -> bytes | str:
        """Next raw frame of the session; raise ConnectionClosed when the connection is gone."""

    @abstractmethod
    async def _do_write(self, session_id: str, data: bytes | str) -> None:
        """Send one raw frame; raise ConnectionClosed when the connection is gone."""

    async def _do_write_batch(self, session_id: str, frames: list[bytes | str]) -> None:
        """Send several raw frames in order; raise ConnectionClosed when the connection is gone.
        One by one here; a transport that can put them on the wire in one write overrides it."""
        for data in frames:
            await self._do_write(session_id, data)

    async def _do_close(self, session_id: str, code: int, reason: str) -> None:
        """Close the session's connection with a close code and reason (after a refused frame);
        the read worker stops either way. Transports whose wire has close codes override this."""

    # --- per-session I/O ----------------------------------------------------------------------

    def open_session_io(self, session_id: str, device_id: str = "") -> None:
        """Create the session's queues and start its read and write workers."""
        if session_id in self._io:
            raise RuntimeError(f"session {session_id} already has I/O")
        io = _SessionIO(session_id, device_id, self._queue_size)
        self._io[session_id] = io
        io.tasks = [
            asyncio.create_task(self._read_worker(session_id, io), name=f"vixio-{session_id}-read"),
            asyncio.create_task(self._write_worker(session_id, io), name=f"vixio-{session_id}-write"),
        ]

    async def close_session_io(self, session_id: str) -> None:
        """Cancel the session's workers and forget its queues, peer and callback."""
        io = self._io.pop(session_id, None)
        if io is None:
            return
        for task in io.tasks:
            task.cancel()
        await asyncio.gather(*io.tasks, return_exceptions=True)

    def protocol_for(self, session_id: str) -> ProtocolBase:
        """The protocol of one session (override when it differs per connection, e.g. by version)."""
        return self.protocol

    def has_session(self, session_id: str) -> bool:
        return session_id in self._io

    async def read(self, session_id: str) -> Message | None:
        """Next non-MCP message from the device; None once the connection is closed."""
        io = self._io.get(session_id)
        if io is None:
            return None
        return await io.reads.get()

    async def write(self, session_id: str, message: Message) -> None:
        """Send a message to the device: at once when nothing is queued before it and the
        transport can write without waiting, else queued (waits while the queue is full)."""
        await self.write_many(session_id, (message,))

    async def write_many(self, session_id: str, messages: Sequence[Message]) -> None:
        """`write` for several messages, in order; written at once, they share one socket write."""
        io = self._io.get(session_id)
        if io is None:
            raise ConnectionClosed(f"session {session_id} is closed")
        if io.writes.empty() and not io.writing and (write_now := self._writer_now(session_id)) is not None:
            # Nothing suspends from the check to the write: no other message can get between.
            if frames := self._encode_all(session_id, io, messages):
                write_now(frames)
            return
        for message in messages:
            await io.writes.put(message)

    async def flush_writes(self, session_ids: list[str], *, timeout: float) -> None:
        """Wait (bounded) until the queued messages of these sessions went out."""
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            if all(io.writes.empty() for sid in session_ids if (io := self._io.get(sid)) is not None):
                await asyncio.sleep(0.02)  # the writer may still be sending the last one it took
                return
            await asyncio.sleep(0.01)

    async def send_mcp(self, session_id: str, payload: dict[str, Any]) -> None:
        """Send a JSON-RPC payload to the device, wrapped by the protocol."""
        await self.write(session_id, self.protocol.create_mcp_message(payload))

    def _writer_now(self, session_id: str) -> Callable[[list[bytes | str]], None] | None:
        """A function writing encoded frames to the session's connection at once (in one write),
        when that is possible now without waiting (e.g. for flow control); None otherwise. The
        default, for transports that write through their write worker only, is None."""
        return None

    def _encode_all(self, session_id: str, io: _SessionIO, messages: Sequence[Message]) -> list[bytes | str]:
        """Messages encoded for the wire; one that cannot be encoded is logged and left out."""
        protocol = self.protocol_for(session_id)
        frames: list[bytes | str] = []
        for message in messages:
            try:
                frames.append(protocol.encode(message))
            except Exception:
                io.logger.exception("failed to send {}", message.get("type", "message"))
        return frames

    # --- device tools -------------------------------------------------------------------------

    def set_mcp_peer(self, session_id: str, peer: McpPeer | None) -> None:
        """Route the session's MCP payloads to `peer` (the device tool client)."""
        self._io[session_id].mcp_peer = peer

    def add_mcp_peer(self, session_id: str, peer: SelectiveMcpPeer) -> None:
        """Give `peer` the session's MCP payloads it `accepts`, before the main peer sees them."""
        self._io[session_id].extra_mcp_peers.append(peer)

    def set_inline_handler(self, session_id: str, handler: InlineHandler | None) -> None:
        """Let `handler` take the session's messages in the read worker, before they are queued
        for `read()`: one task step and one loop iteration less per message (per audio frame).
        It is tried only while nothing waits in that queue, must not suspend, and returns False
        for what it leaves to `read()` (e.g. while its reader is still busy with the last one),
        so messages are still handled in the order they came."""
        self._io[session_id].inline = handler

    def set_device_tools_callback(self, session_id: str, callback: ToolsReadyCallback | None) -> None:
        """Register what to call when the session's device tools are ready."""
        self._io[session_id].tools_ready = callback

    async def notify_device_tools_ready(self, session_id: str, tools: list[Any]) -> None:
        io = self._io.get(session_id)
        if io is not None and io.tools_ready is not None:
            await io.tools_ready(tools)

    # --- workers ------------------------------------------------------------------------------

    async def _read_worker(self, session_id: str, io: _SessionIO) -> None:
        try:
            while True:
                try:
                    data = await self._do_read(session_id)
                except ConnectionClosed:
                    break
                rest = self._take_now(session_id, io, data)
                if isinstance(rest, FrameRefused):
                    io.logger.warning("closing the connection ({}): {}", rest.close_code, rest)
                    await self._do_close(session_id, rest.close_code, str(rest))
                    break
                if rest is not None:
                    await io.reads.put(rest)
        finally:
            if io.bad_frames.pending():
                io.logger.warning(
                    "dropped {} more malformed frames ({} in all)", io.bad_frames.pending(), io.bad_frames.total
                )
            # Wake a reader blocked in read(); a full queue still gets the end marker.
            while io.reads.full():
                io.reads.get_nowait()
            io.reads.put_nowait(None)

    def receive_now(self, session_id: str, data: bytes | str) -> bool:
        """Handle one raw frame at once, as the read worker would have next (for a transport whose
        connection hands frames over as it parses them, while the worker waits for the next one):
        True when done, False when it needs the worker (a full read queue, a refused frame)."""
        io = self._io.get(session_id)
        if io is None:
            return False
        return self._take_now(session_id, io, data) is None

    def _take_now(self, session_id: str, io: _SessionIO, data: bytes | str) -> Message | FrameRefused | None:
        """What the read worker does with one raw frame, up to where it would wait: None when
        done; else the decoded message for a full `reads` queue, or the refusal that closes the
        connection."""
        try:
            message = self.protocol_for(session_id).decode(data)
        except FrameRefused as exc:
            return exc
        except ProtocolError as exc:
            self._log_malformed(io, exc)
            return None
        if self.protocol.is_mcp_message(message):
            self._route_mcp(io, message)
            return None
        if io.inline is not None and io.reads.empty() and self._handle_inline(io, message):
            return None
        if io.reads.full():
            return message
        io.reads.put_nowait(message)
        return None

    @staticmethod
    def _handle_inline(io: _SessionIO, message: Message) -> bool:
        assert io.inline is not None
        try:
            return io.inline(message)
        except Exception:
            # One bad message must not end the session (nor the read worker).
            io.logger.exception("failed to handle {!r}", message.get("type"))
            return True

    @staticmethod
    def _log_malformed(io: _SessionIO, exc: ProtocolError) -> None:
        verdict = io.bad_frames.hit()
        if verdict == 0:
            more = " (further ones are counted, not logged)" if io.bad_frames.total == io.bad_frames.first else ""
            io.logger.warning("dropped malformed frame: {}{}", exc, more)
        elif verdict:
            io.logger.warning(
                "dropped {} more malformed frames ({} in all); last: {}", verdict, io.bad_frames.total, exc
            )

    def _route_mcp(self, io: _SessionIO, message: Message) -> None:
        payload = self.protocol.get_mcp_payload(message)
        if payload is None:
            self._log_malformed(io, ProtocolError("mcp message without an object payload"))
            return
        peer = next((p for p in io.extra_mcp_peers if p.accepts(payload)), None) or io.mcp_peer
        if peer is None:
            self._log_malformed(io, ProtocolError("mcp message, but no device tool client for this session"))
            return
        try:
            peer.on_mcp_message(payload)
        except Exception:
            io.logger.exception("{} failed on an mcp message", type(peer).__name__)

    async def _write_worker(self, session_id: str, io: _SessionIO) -> None:
        while True:
            messages = [await io.writes.get()]
            io.writing = True
            # What was queued meanwhile goes with it (the pacer queues its frames in one step).
            while not io.writes.empty() and len(messages) < WRITE_BATCH:
                messages.append(io.writes.get_nowait())
            frames = self._encode_all(session_id, io, messages)
            try:
                if len(frames) == 1:
                    await self._do_write(session_id, frames[0])
                elif frames:
                    await self._do_write_batch(session_id, frames)
            except ConnectionClosed:
                return
            except Exception:
                io.logger.exception("failed to send {}", ", ".join(str(m.get("type", "message")) for m in messages))
            finally:
                io.writing = False
