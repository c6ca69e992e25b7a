"""One Xiaozhi session's socket I/O: the raw reads and writes `TransportBase` drives, the
protocol each session negotiated, and the messages the server sends on its own.

`TransportBase` (vixio/core/transport.py) runs a read worker and a write worker per session over
these; XiaozhiTransport (transport.py) accepts the connections, does the handshake and the hello,
and fills `_sockets` and `_protocols`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import websockets
from websockets.asyncio.server import ServerConnection

from vixio.core.protocol import Message
from vixio.core.transport import ConnectionClosed, TransportBase
from vixio.patches.websockets import can_send_now, send_now, send_together
from vixio.transports.xiaozhi.mcp.register_tools import RegisterToolsClient
from vixio.transports.xiaozhi.protocol import messages as xp


class SessionChannel(Protocol):
    """A session served over something else than a WebSocket (mqtt/channel.py: MQTT + UDP):
    `recv`, `send` and `close` as a WebSocket's, raising ConnectionClosed once it is gone."""

    vixio_identity: Any
    """The DeviceIdentity the channel's credentials proved."""
    request: Any
    """None: no HTTP request (the vision URL falls back to the configured host)."""
    local_address: Any
    receiver: Callable[[bytes], bool] | None
    """Set by the transport: takes one uplink audio packet at once (True) or leaves it to `recv` (False)."""

    async def recv(self) -> bytes | str: ...

    async def send(self, data: bytes | str) -> None: ...

    async def send_many(self, frames: list[bytes | str]) -> None: ...

    def writer_now(self) -> Callable[[list[bytes | str]], None] | None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


class XiaozhiSessionIO(TransportBase):
    """The per-session I/O half of XiaozhiTransport: one WebSocket (or SessionChannel) per session id."""

    def __init__(self, protocol: xp.XiaozhiProtocol) -> None:
        super().__init__(protocol)
        self._first_protocol = protocol
        """`protocol`, as the Xiaozhi protocol it is (the base class knows it as a ProtocolBase)."""
        self._sockets: dict[str, ServerConnection | SessionChannel] = {}
        self._protocols: dict[str, xp.XiaozhiProtocol] = {}
        """The protocol version each session negotiated (`protocol` until its hello)."""

    # --- raw I/O for TransportBase ------------------------------------------------------------

    async def _do_read(self, session_id: str) -> bytes | str:
        try:
            return await self._sockets[session_id].recv()
        except websockets.ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code in (1007, 1009):
                io = self._io.get(session_id)
                if io is not None:  # the library closed it: an oversize or non-UTF-8 message
                    io.logger.warning("closed the connection ({}): {}", exc.sent.code, exc.sent.reason or "bad frame")
            raise ConnectionClosed(session_id) from exc
        except KeyError as exc:
            raise ConnectionClosed(session_id) from exc

    async def _do_close(self, session_id: str, code: int, reason: str) -> None:
        socket = self._sockets.get(session_id)
        if socket is not None:
            # A close reason is at most 123 bytes on the wire.
            await socket.close(code, reason.encode()[:120].decode(errors="ignore"))

    async def _do_write(self, session_id: str, data: bytes | str) -> None:
        try:
            await self._sockets[session_id].send(data)
        except (websockets.ConnectionClosed, KeyError) as exc:
            raise ConnectionClosed(session_id) from exc

    def _writer_now(self, session_id: str) -> Callable[[list[bytes | str]], None] | None:
        socket = self._sockets.get(session_id)
        if socket is not None and not isinstance(socket, ServerConnection):
            return socket.writer_now()
        if socket is None or not can_send_now(socket):
            return None
        return lambda frames: send_now(socket, frames)

    async def _do_write_batch(self, session_id: str, frames: list[bytes | str]) -> None:
        socket = self._sockets.get(session_id)
        if socket is None:
            raise ConnectionClosed(session_id)
        if not isinstance(socket, ServerConnection):
            await socket.send_many(frames)
            return
        try:
            await send_together(socket, frames)  # one socket write
        except websockets.ConnectionClosed as exc:
            raise ConnectionClosed(session_id) from exc

    # --- each session's protocol -------------------------------------------------------------

    def _route_mcp(self, io: Any, message: Message) -> None:
        # The registerTools client answers in the envelope its client used (bare or wrapped).
        for peer in io.extra_mcp_peers:
            if isinstance(peer, RegisterToolsClient):
                peer.frame_envelope = xp.mcp_envelope(message)
        super()._route_mcp(io, message)

    def protocol_for(self, session_id: str) -> xp.XiaozhiProtocol:
        return self._protocols.get(session_id, self._first_protocol)

    # --- server-initiated messages ------------------------------------------------------------

    async def send_system(self, session_id: str, command: str = "reboot") -> None:
        await self.write(session_id, xp.system(command))

    async def send_alert(self, session_id: str, status: str, message: str, emotion: str = "neutral") -> None:
        await self.write(session_id, xp.alert(status, message, emotion))

    async def send_custom(self, session_id: str, payload: dict[str, Any]) -> None:
        await self.write(session_id, xp.custom(payload))

    async def send_emotion(self, session_id: str, emotion: str) -> None:
        await self.write(session_id, xp.llm_emotion(emotion))
