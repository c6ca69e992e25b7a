"""How a WebSocket connection becomes a session: the HTTP upgrade, then the hello.

The upgrade authenticates the device from its headers or query (HTTP 401 without upgrade on
failure; an anonymous identity when auth is off) and refuses it with 503 past
`xiaozhi.max_connections`, before any per-session state exists. Then the first message: the
device's hello within `hello_timeout` (anything else before it is ignored, logged throttled), or
a registerTools companion's registration, which is all some clients ever send; and the binary
protocol version the session speaks (the header's, else the hello's, else 1).

A mixin of `XiaozhiTransport` (transport.py), which serves the session from there.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from loguru import logger
from websockets.asyncio.server import Server, ServerConnection
from websockets.http11 import Request, Response

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.device_ids import loggable
from vixio.core.log_throttle import LogThrottle
from vixio.core.protocol import Message
from vixio.transports.xiaozhi.protocol.framing import SUPPORTED_VERSIONS
from vixio.transports.xiaozhi.session.auth import (
    AuthError,
    BadDeviceId,
    DeviceAuthenticator,
    DeviceIdentity,
    anonymous_identity,
)
from vixio.transports.xiaozhi.websocket.session_io import XiaozhiSessionIO

COMPANION_HELLO_GRACE = 1.0
"""Seconds a client that registered tools has left to send a hello before it is served as a
registerTools companion (no hello, no audio)."""


class XiaozhiOpening(XiaozhiSessionIO):
    """The handshake and the hello of `XiaozhiTransport` (which sets these attributes)."""

    config: XiaozhiConfig
    authenticator: DeviceAuthenticator
    _server: Server | None
    _refusals: int

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return connection.respond(HTTPStatus.OK, "vixio: Xiaozhi WebSocket endpoint is running\n")
        if self._server is not None and len(self._server.handlers) > self.config.max_connections:
            self._refusals += 1
            if self._refusals == 1 or self._refusals % 100 == 0:
                connection.logger.warning(
                    "refused a handshake: %d connections open (xiaozhi.max_connections); %d refused so far",
                    len(self._server.handlers) - 1,
                    self._refusals,
                )
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "server busy: too many connections\n")
        query = dict(parse_qsl(urlsplit(request.path).query))
        headers = {name: value for name, value in request.headers.raw_items()}
        try:
            identity = self.authenticator.authenticate(headers, query)
        except AuthError as exc:
            if self.authenticator.enabled or isinstance(exc, BadDeviceId):
                claimed = next((v for k, v in headers.items() if k.lower() == "device-id"), "") or query.get(
                    "device-id", "-"
                )
                device = loggable(claimed)
                peer = connection.remote_address[0] if connection.remote_address else "?"
                logger.bind(device=device, component="xiaozhi").info(
                    "handshake refused: device {} from {}: {}", device, peer, exc.reason
                )
                status = HTTPStatus(exc.status)
                return connection.respond(status, f"{status.phrase.lower()}: {exc.reason}\n")
            identity = anonymous_identity(headers, query)
        connection.vixio_identity = identity  # type: ignore[attr-defined]
        return None

    async def _wait_for_hello(self, session_id: str, registered: asyncio.Event | None = None) -> Message | None:
        ignored = LogThrottle(first=3, every=10.0)

        async def first_hello() -> Message | None:
            while True:
                message = await self.read(session_id)
                if message is None or message.get("type") == "hello":
                    return message
                if ignored.hit() == 0:
                    self._io[session_id].logger.info("ignored {!r} before hello", str(message.get("type"))[:40])

        hello = asyncio.ensure_future(first_hello())
        waiters: set[asyncio.Future[Any]] = {hello}
        if registered is not None:  # a registerTools companion registers and never says hello
            waiters.add(asyncio.ensure_future(registered.wait()))
        try:
            await asyncio.wait(waiters, timeout=self.config.hello_timeout, return_when=asyncio.FIRST_COMPLETED)
            if not hello.done() and registered is not None and registered.is_set():
                # A device may register just before its hello; a companion sends none.
                await asyncio.wait({hello}, timeout=min(COMPANION_HELLO_GRACE, self.config.hello_timeout))
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        if not hello.done() or hello.cancelled():
            return None
        message = hello.result()
        if message is None and session_id in self._io:  # closed: leave the end marker for the next reader
            self._io[session_id].reads.put_nowait(None)
        return message

    def _negotiate_version(self, identity: DeviceIdentity, hello: Message, log: Any) -> int:
        header_version = identity.protocol_version
        hello_version = hello.get("version")
        hello_int = isinstance(hello_version, int) and not isinstance(hello_version, bool)
        version = header_version if header_version != 1 or not hello_int else hello_version
        if version not in SUPPORTED_VERSIONS:
            log.warning("unsupported binary protocol version {}; using 1", version)
            version = 1
        return version
