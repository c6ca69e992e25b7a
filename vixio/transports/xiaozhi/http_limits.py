"""Connection limits for the HTTP port, and accept errors logged at a bounded rate.

aiohttp closes a connection that has sent no complete request within its keep-alive timeout
(set from `xiaozhi.http.keepalive_timeout`; its own default is an hour), which covers idle
and slow-header clients. What it lacks is a cap: `CappedAppRunner` closes every connection past
`max_connections` as soon as it is accepted, so idle sockets cannot use up the process's file
descriptors and starve devices on the WebSocket port.

When the process does run out of descriptors, asyncio logs every failed `accept()` with a
traceback (tens of thousands a second). `install_accept_error_throttle` turns those into one
line per second with a count, for both ports.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from loguru import logger

_ACCEPT_ERROR_MESSAGES = ("socket.accept() out of system resource", "Error on transport creation")


class _CappedServer(web.Server):
    """An aiohttp low-level server that refuses connections past `max_connections`."""

    def __init__(self, *args: Any, max_connections: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_connections = max_connections
        self.refused = 0
        """Connections closed on accept because the cap was reached."""
        self._last_warning = 0.0

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if len(self._connections) > self.max_connections:
            self.refused += 1
            now = time.monotonic()
            if now - self._last_warning >= 1.0:
                self._last_warning = now
                logger.warning("HTTP: {} connections open (xiaozhi.http.max_connections); closing new ones "
                               "({} so far)", len(self._connections) - 1, self.refused)
            transport.abort()


class CappedAppRunner(web.AppRunner):
    """`web.AppRunner` whose server closes connections beyond `max_connections` on accept."""

    def __init__(self, app: web.Application, *, max_connections: int, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._max_connections = max_connections

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        capped = _CappedServer(server.request_handler, request_factory=server.request_factory,
                               handler_cancellation=server.handler_cancellation,
                               max_connections=self._max_connections, **server._kwargs)
        return capped


class AcceptErrorThrottle:
    """A loop exception handler: accept failures become one line per second with a count; any
    other exception goes to the handler that was installed before."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._previous = loop.get_exception_handler()
        self._count = 0
        self._last = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message.startswith(_ACCEPT_ERROR_MESSAGES):
            self._count += 1
            now = time.monotonic()
            if now - self._last >= 1.0:
                self._last = now
                logger.error("accept failed {} time(s) in the last second: {} ({}); raise the open-file "
                             "limit (ulimit -n) or lower xiaozhi.max_connections / xiaozhi.http.max_connections",
                             self._count, message, context.get("exception"))
                self._count = 0
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def uninstall(self) -> None:
        if self._loop.get_exception_handler() is self:
            self._loop.set_exception_handler(self._previous)


def install_accept_error_throttle(loop: asyncio.AbstractEventLoop | None = None) -> AcceptErrorThrottle:
    """Route the loop's accept errors through an AcceptErrorThrottle; returns it (to uninstall)."""
    loop = loop or asyncio.get_running_loop()
    throttle = AcceptErrorThrottle(loop)
    loop.set_exception_handler(throttle)
    return throttle
