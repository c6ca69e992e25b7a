"""Operator access to the HTTP port: the admin token that guards operator routes.

Operator routes (`/metrics` details, activation confirm, the console and its `/api/`) show live
device ids and can act on sessions, so they answer only an operator:

- with `xiaozhi.http.admin_token` set: a request carrying that token, as
  `Authorization: Bearer <token>`, the `vixio_admin` cookie (what the console page keeps), or a
  `token` query parameter (for links and `EventSource`, which cannot set headers);
- with no token configured: direct calls from this machine only (loopback or this host's own
  address, and neither proxy headers nor a browser `Origin` from another site), and the refusal
  says how to configure a token.

`AdminGuard.check(request)` returns None when the caller is an operator, else the JSON error
response to send; `AdminGuard.protect(handler)` wraps a route handler with that check.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COOKIE_NAME = "vixio_admin"
"""Cookie the console sets after the operator typed the token once."""
QUERY_PARAMETER = "token"

_PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


class AdminGuard:
    """Decides whether an HTTP request comes from an operator."""

    def __init__(self, token: str = "") -> None:
        """`token` empty means no token is configured: only direct local callers are operators."""
        self.token = token

    @property
    def configured(self) -> bool:
        return bool(self.token)

    def presented(self, request: web.Request) -> str:
        """The token a request carries (header, cookie or query), or ""."""
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        cookie = request.cookies.get(COOKIE_NAME, "")
        if cookie:
            return cookie
        return request.query.get(QUERY_PARAMETER, "")

    def is_operator(self, request: web.Request) -> bool:
        if self.token:
            presented = self.presented(request)
            return bool(presented) and hmac.compare_digest(presented.encode(), self.token.encode())
        return is_local_direct(request)

    def check(self, request: web.Request) -> web.Response | None:
        """None when `request` may use operator routes, else a 401/403 JSON response."""
        if self.is_operator(request):
            return None
        if self.token:
            return web.json_response(
                {"error": "operator token required: send Authorization: Bearer <xiaozhi.http.admin_token>"},
                status=401, headers={"WWW-Authenticate": 'Bearer realm="vixio"'})
        return web.json_response(
            {"error": "operator routes answer only on this machine because no operator token is configured; "
                      "set xiaozhi.http.admin_token (e.g. ${VIXIO_ADMIN_TOKEN}) to use them from elsewhere"},
            status=403)

    def protect(self, handler: Handler) -> Handler:
        """`handler`, answered only for operators."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            refusal = self.check(request)
            return refusal if refusal is not None else await handler(request)

        guarded.__name__ = getattr(handler, "__name__", "guarded")
        guarded.__doc__ = handler.__doc__
        return guarded


def is_loopback(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def is_local_direct(request: web.Request) -> bool:
    """A caller on this machine talking to us directly: not through a proxy on this host, and not
    a web page of another site (a browser on this machine would otherwise lend any site our
    loopback address)."""
    if any(name in request.headers for name in _PROXY_HEADERS):
        return False
    origin = request.headers.get("Origin")
    if origin is not None and not _same_origin(origin, request):
        return False
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    # A caller whose address is our own interface address is on this machine too (bound to a LAN IP).
    same_host = sockname is not None and request.remote == sockname[0]
    return is_loopback(request.remote) or same_host


def _same_origin(origin: str, request: web.Request) -> bool:
    host = request.headers.get("Host", "")
    return bool(host) and origin.rstrip("/").lower() in (f"http://{host}".lower(), f"https://{host}".lower())
