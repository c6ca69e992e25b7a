"""The HTTP port OTA is served on: one aiohttp application, the guard in front of every route,
and the port's start and stop. What the routes answer is ota.py (OTA, activation, health); the
console, `/api/` and `/metrics` add theirs with `add_route`.

Every route that is not a device route (`is_device_route`: the console, `/api/`, `/metrics`,
activation confirm) is an operator route: it answers only a `Host` that names this server
(hosts.py `ServerNames`), whatever token the request carries, so a web page that rebinds its
name to this address cannot drive it.

Hostile callers are expected on this port (docs/security.md): bodies are bounded in size, time
and JSON depth; idle and slow connections are closed after `http.keepalive_timeout`; at most
`http.max_connections` are open at once, `http.max_connections_per_address` from one client.
A failed request always gets a 4xx/5xx JSON `{"error": ...}`: the firmware falls back to MQTT
on an error body sent with 200.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from aiohttp import web
from loguru import logger
from yarl import URL

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.device_ids import loggable
from vixio.core.json_limits import DEFAULT_MAX_DEPTH
from vixio.state.store import StoreError
from vixio.transports.xiaozhi.http.admin import AdminGuard
from vixio.transports.xiaozhi.http.hosts import VISION_PATH, ServerNames
from vixio.transports.xiaozhi.http.limits import CappedAppRunner

OTA_PATH = "/xiaozhi/ota/"
MAX_BODY_BYTES = 64 * 1024
"""The firmware's system-info JSON is a few KiB; anything far larger is not a device."""

_CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Device-Id, Client-Id, Protocol-Version, "
    "Activation-Version, Serial-Number, Accept-Language",
    "Access-Control-Max-Age": "86400",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

request_device: ContextVar[str] = ContextVar("ota_request_device", default="-")
"""Device id for the request log line; handlers run in the middleware's task, so it sees what they set."""


HTTP_SHUTDOWN_TIMEOUT = 2.0
"""Seconds a request in flight gets to finish when the HTTP port closes (aiohttp's default, 60 s,
held a graceful stop for a minute before the workers were told to drain)."""


class BadRequest(Exception):
    """Turned into a 4xx JSON reply by the middleware."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def is_device_route(path: str) -> bool:
    """OTA, the activation poll, the camera upload and `/healthz`: what devices call. Every other
    path is an operator route."""
    if path.startswith(OTA_PATH + "activate/confirm"):
        return False
    return path.startswith(OTA_PATH.rstrip("/")) or path in ("/healthz", VISION_PATH)


def display_host(host: str) -> str:
    """A host a local client can dial for a bind address ("0.0.0.0"/"::" are not dialable)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


class HttpPort:
    """The aiohttp server on `config.http.host:port`: its routes are added by the subclass
    (OtaServer) and by `add_route`."""

    def __init__(self, config: XiaozhiConfig) -> None:
        self._config = config
        self.admin = AdminGuard(config.http.admin_token)
        """Who is an operator on this port (metrics details, activation confirm, the console)."""
        self.names = ServerNames(config)
        """The names operator routes may be addressed by."""
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY_BYTES)

    streamed_paths: set[str] = {VISION_PATH}
    """Routes whose handler reads its own body as a stream, bounded in size and time (the camera
    upload is larger than `MAX_BODY_BYTES`); every other body is read here first."""

    @property
    def app(self) -> web.Application:
        """The aiohttp application; add routes before `start()` (aiohttp freezes the router then)."""
        return self._app

    def add_route(self, method: str, path: str, handler: Handler) -> None:
        """Serve `handler` at `method path` too (e.g. `/metrics`); only before `start()`."""
        self._app.router.add_route(method, path, handler)

    @property
    def port(self) -> int:
        """The bound port (resolves `http.port: 0`); only after `start()`."""
        if self._port is None:
            raise RuntimeError("OtaServer.port is known only after start()")
        return self._port

    @property
    def url(self) -> str:
        """The OTA URL as a client on this machine dials it, e.g. http://127.0.0.1:8003/xiaozhi/ota/."""
        return str(URL.build(scheme="http", host=display_host(self._config.http.host), port=self.port, path=OTA_PATH))

    async def start(self) -> None:
        """Bind and serve; returns once listening."""
        if self._runner is not None:
            raise RuntimeError("OtaServer is already started")
        http = self._config.http
        runner = CappedAppRunner(
            self._app,
            max_connections=http.max_connections,
            per_address=http.max_connections_per_address,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=http.keepalive_timeout,
            shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT,
        )
        await runner.setup()
        site = web.TCPSite(runner, self._config.http.host, self._config.http.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        logger.debug("OTA server on {} (set this as the device's OTA URL with the LAN address)", self.url)

    async def stop(self) -> None:
        """Stop serving; safe to call when not started."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        context_token = request_device.set(loggable(request.headers.get("Device-Id", "")))
        response: web.StreamResponse
        device_route = is_device_route(request.path)
        refusal = None if device_route else self.names.refusal(request)
        if refusal is not None:
            response = refusal
        elif request.method == "OPTIONS":
            response = web.Response(status=204)
        else:
            try:
                if request.path not in self.streamed_paths:
                    await self._read_body(request)
                response = await handler(request)
            except BadRequest as exc:
                response = json_error(exc.status, exc.message)
            except web.HTTPException as exc:
                response = json_error(exc.status, exc.reason)
            except StoreError:  # the store logged its outage once; the device asks again
                response = json_error(503, "the state store cannot be reached now; try again")
            except RecursionError:  # a parser that skipped the depth check (json_limits.py) met deep JSON
                response = json_error(400, f"body refused: JSON nested deeper than {DEFAULT_MAX_DEPTH} levels")
            except Exception:  # noqa: BLE001 - a handler bug still gets a JSON 500 and its log line
                logger.exception("OTA handler failed for {} {}", request.method, request.path)
                response = json_error(500, "internal server error")
        # Device routes only: operator routes trust local callers, so web pages get no CORS grant there.
        if device_route:
            response.headers.update(_CORS_HEADERS)
        device = request_device.get()
        request_device.reset(context_token)
        logger.bind(device=device).info(
            "{} {} -> {} ({:.1f} ms)",
            request.method,
            request.path,
            response.status,
            (time.perf_counter() - started) * 1000,
        )
        return response

    async def _read_body(self, request: web.Request) -> None:
        """Read the body before the handler: bounded in time here, in size by client_max_size
        (aiohttp keeps it, so the handler's own read() returns at once)."""
        if not request.body_exists:
            return
        try:
            async with asyncio.timeout(self._config.http.body_timeout):
                await request.read()
        except TimeoutError:
            raise BadRequest(f"the body did not arrive within {self._config.http.body_timeout:g} s", 408) from None
