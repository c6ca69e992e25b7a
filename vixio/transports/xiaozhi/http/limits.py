"""Connection limits for the HTTP port, and accept errors logged at a bounded rate.

aiohttp closes a connection that has sent no complete request within its keep-alive timeout
(set from `xiaozhi.http.keepalive_timeout`; its own default is an hour), which covers idle
and slow-header clients. What it lacks is a cap: `CappedAppRunner` refuses every connection past
`max_connections`, and every connection from an address that already holds
`max_connections_per_address` (an IPv6 client counts by its /64, which one host usually owns
whole), so idle sockets cannot use up the process's file descriptors, and one client cannot take
the port from devices that need OTA and activation.

A connection is admitted or refused before aiohttp builds anything for it: each accepted socket
first gets a `_Gate` protocol, which hands the transport to a new aiohttp `RequestHandler`
(`transport.set_protocol`) or writes a 503 and closes it. Refusals make one log line a second
with their count, never one per connection.

When the process does run out of descriptors, asyncio logs every failed `accept()` with a
traceback (tens of thousands a second). `install_accept_error_throttle` turns those into one
line per second with a count, for both ports.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from loguru import logger

from vixio.patches.aiohttp import ServerClassRunner

_ACCEPT_ERROR_MESSAGES = ("socket.accept() out of system resource", "Error on transport creation")


def _refusal(message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


_FULL = _refusal("too many open connections (xiaozhi.http.max_connections); try again shortly")
_SHARE = _refusal("too many open connections from your address (xiaozhi.http.max_connections_per_address)")


def address_key(peername: Any) -> str:
    """What the per-address share counts by: the IPv4 address (also when IPv4-mapped), an IPv6
    address's /64 network, "local" for a Unix socket."""
    if not isinstance(peername, tuple) or not peername:
        return "local"
    try:
        ip = ipaddress.ip_address(str(peername[0]).split("%")[0])
    except ValueError:
        return str(peername[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class _Gate(asyncio.Protocol):
    """The first protocol of an accepted connection: admits it into aiohttp or refuses it."""

    def __init__(self, server: _CappedServer) -> None:
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Reading starts after this returns, so the handler sees every byte.
        handler = self._server.admit(transport)  # type: ignore[arg-type]
        if handler is not None:
            transport.set_protocol(handler)
            handler.connection_made(transport)


class _RefusalLog:
    """The first refusal after a quiet second is logged at once; later ones as one count a second
    (and what is left when the server stops)."""

    def __init__(self, open_connections: Callable[[], int]) -> None:
        self._open = open_connections
        self.full = 0
        self.share: Counter[str] = Counter()
        self._handle: asyncio.TimerHandle | None = None

    def note(self, address: str | None) -> None:
        if address is None:
            self.full += 1
        else:
            self.share[address] += 1
        if self._handle is None:
            self._flush()

    def _flush(self, again: bool = True) -> None:
        self._handle = None
        shared = sum(self.share.values())
        if not self.full and not shared:
            return
        parts = []
        if self.full:
            parts.append(f"{self.full} at the cap (xiaozhi.http.max_connections)")
        if shared:
            ((top, count),) = self.share.most_common(1)
            others = f", the rest from {len(self.share) - 1} other address(es)" if len(self.share) > 1 else ""
            parts.append(
                f"{shared} over one address's share (xiaozhi.http.max_connections_per_address), "
                f"{count} from {top}{others}"
            )
        logger.warning(
            "HTTP: refused {} connection(s) with 503 since the last line: {}; {} open",
            self.full + shared,
            "; ".join(parts),
            self._open(),
        )
        self.full, self.share = 0, Counter()
        if again:
            self._handle = asyncio.get_running_loop().call_later(1.0, self._flush)

    def close(self) -> None:
        """Log what is still uncounted; no more lines."""
        if self._handle is not None:
            self._handle.cancel()
        self._flush(again=False)


class _CappedServer(web.Server):
    """An aiohttp low-level server that refuses connections past `max_connections`, and past
    `per_address` from one address (0: no share)."""

    def __init__(self, *args: Any, max_connections: int, per_address: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_connections = max_connections
        self.per_address = per_address
        self.refused = 0
        """Connections refused so far (cap or share)."""
        self.open_by_address: Counter[str] = Counter()
        """Admitted connections still open, by `address_key`."""
        self._addresses: dict[RequestHandler, str] = {}
        self._log = _RefusalLog(lambda: self.open_connections)

    @property
    def open_connections(self) -> int:
        return len(self._addresses)

    def __call__(self) -> Any:  # the listener's protocol factory
        return _Gate(self)

    def admit(self, transport: asyncio.Transport) -> RequestHandler | None:
        """A new RequestHandler for the connection, or None after refusing it."""
        address = address_key(transport.get_extra_info("peername"))
        if self.open_connections >= self.max_connections:
            refused: str | None = None
            reply = _FULL
        elif self.per_address and self.open_by_address[address] >= self.per_address:
            refused, reply = address, _SHARE
        else:
            return super().__call__()
        self.refused += 1
        transport.write(reply)
        transport.close()
        self._log.note(refused)
        return None

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        address = address_key(transport.get_extra_info("peername"))
        self._addresses[handler] = address
        self.open_by_address[address] += 1

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        address = self._addresses.pop(handler, None)
        if address is not None:
            self.open_by_address[address] -= 1
            if self.open_by_address[address] <= 0:
                del self.open_by_address[address]

    async def shutdown(self, timeout: float | None = None) -> None:
        self._log.close()
        await super().shutdown(timeout)


class CappedAppRunner(ServerClassRunner):
    """`web.AppRunner` whose server refuses connections beyond `max_connections` (and beyond
    `per_address` from one address) as they are accepted."""

    server_class = _CappedServer

    def __init__(self, app: web.Application, *, max_connections: int, per_address: int = 0, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._max_connections = max_connections
        self._per_address = per_address

    def server_arguments(self) -> dict[str, Any]:
        return {"max_connections": self._max_connections, "per_address": self._per_address}


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
                logger.error(
                    "accept failed {} time(s) in the last second: {} ({}); raise the open-file "
                    "limit (ulimit -n) or lower xiaozhi.max_connections / xiaozhi.http.max_connections",
                    self._count,
                    message,
                    context.get("exception"),
                )
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
