"""The console's HTTP side on the OTA port: the page at `/console/` and its JSON API at `/api/`.

    GET  /console/                  the page (static files shipped in the package)
    GET  /api/console               who may use the console (open to anyone: the page asks first)
    POST /api/login                 {"token": ...} → sets the `vixio_admin` cookie (open)
    POST /api/logout                clears it
    GET  /api/sessions              live sessions (summaries)
    GET  /api/sessions/{id}         one session: conversation by turn, tool calls, latency marks
    GET  /api/tools[?session=ID]    every tool the agent could call, with its policy state
    POST /api/execute               {"session": ID|null, "tool": name, "arguments": {...}}
    POST /api/parse                 {"text": reply, "protocol": "vcp"|"xml"|"auto"}
    POST /api/say                   {"session": ID, "text": sentence}, or {"device": D, "text": message}
    GET  /api/events                Server-Sent Events: `sessions` whenever a summary changes

Everything under `/api/` except `console`, `login` and `logout` answers only operators
(`AdminGuard`: the token by header, cookie or `?token=`; with no token configured, direct callers
on this machine). A request that a browser sent from another site (its `Origin` is not this
server) is refused whatever it carries. docs/console.md has request and response examples.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from loguru import logger

from vixio.console.backend import ConsoleBackend, ConsoleError
from vixio.console.parse import PROTOCOLS, check_reply
from vixio.console.replies import checked_device_id
from vixio.console.replies import json_body as _body
from vixio.console.replies import json_reply as _json
from vixio.core.json_limits import loads_bounded
from vixio.transports.xiaozhi.http.admin import COOKIE_NAME, AdminGuard, Handler, is_foreign_origin, is_local_direct

STATIC_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}
EVENT_INTERVAL = 0.5
"""Seconds between two looks at the sessions for the event stream."""
KEEPALIVE = 15.0
"""Seconds between comments on an idle event stream (proxies close silent connections)."""
MAX_EVENT_STREAMS = 16
"""Open event streams at once; more get 503 (each costs a look at every session twice a second)."""
MAX_PARSE_CHARS = 32_000
LOGIN_FAILURE_DELAY = 0.5
"""Seconds a wrong token waits for its answer; guessing is bounded by the guard's throttle
(admin.py `TokenThrottle`: a few wrong tokens per address, then HTTP 429 unchecked)."""
COOKIE_MAX_AGE = 30 * 24 * 3600
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_PAGE_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


class ConsoleApi:
    """Registers the page and the API on an aiohttp app (the OTA server's)."""

    def __init__(self, backend: ConsoleBackend, guard: AdminGuard, *, vcp_fuzzy: bool = False) -> None:
        self.backend = backend
        self.guard = guard
        self.vcp_fuzzy = vcp_fuzzy
        self._streams = 0
        self._closing = asyncio.Event()
        """Set when the server stops: open event streams end (aiohttp would wait for them)."""
        self._static = _load_static()
        self.say_to_device: Callable[[str, str], Awaitable[dict[str, Any]]] | None = None
        """`/api/say` with a device and no session: an operator message (console/reminders.py)."""
        self._shared: tuple[float, str] | None = None
        """(when, data) of the last sessions snapshot, so many open pages cost one look."""

    def close(self) -> None:
        """End the open event streams (call before the HTTP server stops)."""
        self._closing.set()

    def register(self, add_route: Any) -> None:
        """`add_route(method, path, handler)`, e.g. `OtaServer.add_route`."""
        add_route("GET", "/console", self._redirect)
        add_route("GET", "/console/", self._page)
        add_route("GET", "/console/{name}", self._asset)
        for method, path, handler in (
            ("GET", "/api/console", self._info),
            ("POST", "/api/login", self._login),
            ("POST", "/api/logout", self._logout),
        ):
            add_route(method, path, self._answer(handler))
        protected: tuple[tuple[str, str, Handler], ...] = (
            ("GET", "/api/sessions", self._sessions),
            ("GET", "/api/sessions/{session_id}", self._session),
            ("GET", "/api/tools", self._tools),
            ("POST", "/api/execute", self._execute),
            ("POST", "/api/parse", self._parse),
            ("POST", "/api/say", self._say),
            ("GET", "/api/events", self._events),
        )
        for method, path, guarded in protected:
            add_route(method, path, self._protect(guarded))

    def _protect(self, handler: Handler) -> Handler:
        """`handler` for operators only."""
        return self._answer(self.guard.protect(handler))

    @staticmethod
    def _answer(handler: Handler) -> Handler:
        """`handler` with other sites' pages refused and `ConsoleError`s answered as JSON."""

        async def answered(request: web.Request) -> web.StreamResponse:
            if is_foreign_origin(request):
                return _error(403, "the console API does not answer pages of other sites")
            try:
                return await handler(request)
            except ConsoleError as exc:
                return _error(exc.status, exc.message)

        answered.__name__ = getattr(handler, "__name__", "answered")
        return answered

    # --- the page ------------------------------------------------------------------------------

    async def _redirect(self, request: web.Request) -> web.StreamResponse:
        # Returned, not raised: the OTA middleware turns raised HTTP errors into JSON.
        return web.Response(status=302, headers={"Location": "/console/"})

    async def _page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _asset(self, request: web.Request) -> web.Response:
        return self._file(request.match_info["name"])

    def _file(self, name: str) -> web.Response:
        found = self._static.get(name)
        if found is None:
            return _error(404, f"no console file {name!r}")
        body, content_type = found
        headers = dict(_SECURITY_HEADERS)
        if name.endswith(".html"):
            headers["Content-Security-Policy"] = _PAGE_CSP
        return web.Response(
            body=body, content_type=content_type, charset="utf-8" if "text" in content_type else None, headers=headers
        )

    # --- who may use it ------------------------------------------------------------------------

    async def _info(self, request: web.Request) -> web.Response:
        operator = self.guard.is_operator(request)
        if self.guard.configured:
            message = "signed in" if operator else "type the operator token (xiaozhi.http.admin_token) to sign in"
        elif operator:
            message = (
                "no operator token is configured: the console answers on this machine only "
                "(set xiaozhi.http.admin_token to use it from elsewhere)"
            )
        else:
            message = (
                "no operator token is configured, so the console answers only on the server's own "
                "machine; set xiaozhi.http.admin_token (e.g. ${VIXIO_ADMIN_TOKEN}) to use it from here"
            )
        return _json(
            {
                "operator": operator,
                "token_configured": self.guard.configured,
                "local": is_local_direct(request),
                "message": message,
            }
        )

    async def _login(self, request: web.Request) -> web.Response:
        if not self.guard.configured:
            return _error(409, "no operator token is configured: the console answers on this machine only")
        body = await _body(request, '{"token": TOKEN}')
        token = body.get("token")
        if not isinstance(token, str) or not token:
            return _error(400, 'the body must be {"token": TOKEN} with the operator token (xiaozhi.http.admin_token)')
        verdict = self.guard.attempt(request, token)
        if verdict == "throttled":
            return self.guard.throttled(request)
        if verdict != "operator":
            await asyncio.sleep(LOGIN_FAILURE_DELAY)
            return _error(401, "wrong operator token")
        response = _json({"operator": True})
        response.set_cookie(
            COOKIE_NAME,
            token,
            max_age=COOKIE_MAX_AGE,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
        return response

    async def _logout(self, request: web.Request) -> web.Response:
        response = _json({"operator": False})
        response.del_cookie(COOKIE_NAME, path="/")
        return response

    # --- the API -------------------------------------------------------------------------------

    async def _sessions(self, request: web.Request) -> web.Response:
        return _json({"sessions": await self.backend.sessions()})

    async def _session(self, request: web.Request) -> web.Response:
        return _json(await self.backend.session(request.match_info["session_id"]))

    async def _tools(self, request: web.Request) -> web.Response:
        return _json(await self.backend.tools(request.query.get("session") or None))

    async def _execute(self, request: web.Request) -> web.Response:
        body = await _body(request)
        arguments = body.get("arguments", {})
        if isinstance(arguments, str):  # JSON mode may send the text as it was typed
            try:
                arguments = loads_bounded(arguments or "{}")
            except ValueError as exc:  # JsonTooDeep included
                raise ConsoleError(f"arguments are not JSON: {exc}") from None
        return _json(await self.backend.execute(_session_id(body), body.get("tool", ""), arguments))

    async def _parse(self, request: web.Request) -> web.Response:
        body = await _body(request)
        text, protocol = body.get("text"), body.get("protocol", "auto")
        if not isinstance(text, str) or len(text) > MAX_PARSE_CHARS:
            raise ConsoleError(f"text must be a string of at most {MAX_PARSE_CHARS} characters")
        if protocol not in PROTOCOLS:
            raise ConsoleError(f"protocol must be one of {', '.join(PROTOCOLS)}")
        return _json(check_reply(text, protocol, vcp_fuzzy=self.vcp_fuzzy))

    async def _say(self, request: web.Request) -> web.Response:
        body = await _body(request)
        session_id = _session_id(body)
        if session_id is None and body.get("device") is not None and self.say_to_device is not None:
            # No session: an operator message to a device, talking or not (console/reminders.py).
            return _json(await self.say_to_device(checked_device_id(body.get("device")), body.get("text", "")))
        if session_id is None:
            raise ConsoleError("say needs a session (or a device)")
        return _json(await self.backend.say(session_id, body.get("text", "")))

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if self._closing.is_set():
            return _error(503, "the server is stopping")
        if self._streams >= MAX_EVENT_STREAMS:
            return _error(503, f"too many open event streams (at most {MAX_EVENT_STREAMS})")
        self._streams += 1
        try:
            response = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
            )
            await response.prepare(request)
            last = None
            quiet = 0.0
            while not self._closing.is_set():
                if request.transport is None or request.transport.is_closing():
                    break  # the page went away (aiohttp does not cancel the handler)
                current = await self._snapshot()
                if current != last:
                    await response.write(f"event: sessions\ndata: {current}\n\n".encode())
                    last, quiet = current, 0.0
                elif quiet >= KEEPALIVE:
                    await response.write(b": keepalive\n\n")
                    quiet = 0.0
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), EVENT_INTERVAL)
                quiet += EVENT_INTERVAL
        except (ConnectionResetError, ConnectionError):
            pass  # the page went away
        finally:
            self._streams -= 1
        return response

    async def _snapshot(self) -> str:
        """The sessions as one event's data; shared by every open stream within half an interval."""
        now = time.monotonic()
        if self._shared is None or now - self._shared[0] >= EVENT_INTERVAL / 2:
            sessions = await self.backend.sessions()
            self._shared = (now, json.dumps({"sessions": sessions}, ensure_ascii=False, separators=(",", ":")))
        return self._shared[1]


def _load_static() -> dict[str, tuple[bytes, str]]:
    """The page's files, read once from the package (works from a wheel as from a checkout)."""
    files: dict[str, tuple[bytes, str]] = {}
    folder = resources.files("vixio.console") / "static"
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in STATIC_TYPES:
            files[entry.name] = (entry.read_bytes(), STATIC_TYPES[suffix])
    if "index.html" not in files:
        logger.error("the console's static files are missing from the vixio package")
    return files


def _session_id(body: dict[str, Any]) -> str | None:
    value = body.get("session")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 128:
        raise ConsoleError("session must be a session id")
    return value


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)
