"""Operator access to the HTTP port: the admin token that guards operator routes.

Operator routes (`/metrics` details, activation confirm, the console and its `/api/`) show live
device ids and can act on sessions, so they answer only an operator:

- with `xiaozhi.http.admin_token` set: a request carrying that token, as
  `Authorization: Bearer <token>`, the `vixio_admin` cookie (what the console page keeps), or a
  `token` query parameter (for links and `EventSource`, which cannot set headers);
- with no token configured: direct calls from this machine only (loopback or this host's own
  address, and neither proxy headers nor a browser `Origin` from another site), and the refusal
  says how to configure a token.

Either way a request that a browser sent from a page of another site (an `Origin` that is not
this server) is no operator, whatever token it carries: another site's script must not read
operator routes with a token it was given or guessed.

Wrong tokens are throttled (`TokenThrottle`): after `ADDRESS_BURST` wrong tokens from one client
address (IPv6: one /64) its requests carrying a token get HTTP 429 without being checked, one
more allowed every `ADDRESS_INTERVAL` s; past `OVERALL_BURST` wrong tokens from all addresses
together, every request carrying a token gets 429 until one is allowed again (one every
`OVERALL_INTERVAL` s). A right token is answered at once while its address is not throttled;
requests without a token are not counted. Memory is bounded by `MAX_ADDRESSES`.

`AdminGuard.check(request)` returns None when the caller is an operator, else the JSON error
response to send; `AdminGuard.protect(handler)` wraps a route handler with that check. A server
keeps one guard (`HttpPort.admin`) so its routes share one throttle.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from loguru import logger

from vixio.transports.xiaozhi.http.limits import address_key

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COOKIE_NAME = "vixio_admin"
"""Cookie the console sets after the operator typed the token once."""
QUERY_PARAMETER = "token"

_PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")

ADDRESS_BURST, ADDRESS_INTERVAL = 5, 10.0
"""Wrong tokens one address may send at once, and seconds after which one more is allowed."""
OVERALL_BURST, OVERALL_INTERVAL = 50, 1.0
"""Wrong tokens all addresses together may send at once, and seconds after which one more is allowed."""
MAX_ADDRESSES = 4096
"""Addresses whose wrong tokens are remembered; past it the oldest are forgotten (the overall
limit still holds them)."""
LOG_EVERY = 60.0
"""Seconds between two WARNINGs about refused requests."""


class _Debt:
    """Failures that drain one per `interval` seconds (a leaky bucket; the caller compares with its burst)."""

    __slots__ = ("level", "since")

    def __init__(self, now: float) -> None:
        self.level = 0.0
        self.since = now

    def drained(self, now: float, interval: float) -> float:
        self.level = max(0.0, self.level - (now - self.since) / interval)
        self.since = now
        return self.level


class TokenThrottle:
    """Counts wrong operator tokens by client address and overall; says when to refuse unchecked."""

    def __init__(
        self,
        *,
        address_burst: int = ADDRESS_BURST,
        address_interval: float = ADDRESS_INTERVAL,
        overall_burst: int = OVERALL_BURST,
        overall_interval: float = OVERALL_INTERVAL,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address_burst, self.address_interval = address_burst, address_interval
        self.overall_burst, self.overall_interval = overall_burst, overall_interval
        self.max_addresses = max_addresses
        self._clock = clock
        self._addresses: dict[str, _Debt] = {}
        self._overall = _Debt(clock())
        self.refused = 0
        """Requests refused unchecked so far."""
        self._unlogged = 0
        self._logged_at: float | None = None

    def retry_after(self, address: str) -> float:
        """Seconds until `address` may present a token again; 0 when it may now."""
        now = self._clock()
        wait = self._wait(self._overall, now, self.overall_burst, self.overall_interval)
        debt = self._addresses.get(address)
        if debt is not None:
            wait = max(wait, self._wait(debt, now, self.address_burst, self.address_interval))
        return wait

    def refusing(self, address: str) -> None:
        """Count one request refused unchecked; a WARNING at most once a minute, with the count."""
        self.refused += 1
        self._unlogged += 1
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            logger.warning(
                "operator token: refused {} request(s) unchecked (HTTP 429) after too many wrong tokens, "
                "the latest from {}; someone may be guessing xiaozhi.http.admin_token",
                self._unlogged,
                address,
            )
            self._logged_at, self._unlogged = now, 0

    def failed(self, address: str) -> None:
        """Count one wrong token from `address`."""
        now = self._clock()
        self._overall.drained(now, self.overall_interval)
        self._overall.level += 1
        debt = self._addresses.pop(address, None)  # re-inserted last: the dict is oldest-first
        if debt is None:
            if len(self._addresses) >= self.max_addresses:
                self._forget_paid(now)
            debt = _Debt(now)
        debt.drained(now, self.address_interval)
        debt.level += 1
        self._addresses[address] = debt

    @property
    def addresses(self) -> int:
        """Addresses remembered now."""
        return len(self._addresses)

    def _forget_paid(self, now: float) -> None:
        for key in [k for k, d in self._addresses.items() if d.drained(now, self.address_interval) == 0.0]:
            del self._addresses[key]
        while len(self._addresses) >= self.max_addresses:
            del self._addresses[next(iter(self._addresses))]

    @staticmethod
    def _wait(debt: _Debt, now: float, burst: int, interval: float) -> float:
        excess = debt.drained(now, interval) - (burst - 1)
        return excess * interval if excess > 0 else 0.0


class AdminGuard:
    """Decides whether an HTTP request comes from an operator."""

    def __init__(self, token: str = "", throttle: TokenThrottle | None = None) -> None:
        """`token` empty means no token is configured: only direct local callers are operators."""
        self.token = token
        self.throttle = throttle or TokenThrottle()
        """Wrong tokens seen by this guard (share the guard to share it)."""

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
        """Whether `request` comes from an operator (a wrong token it carries counts as a failure:
        ask once per request)."""
        return self.verdict(request) == "operator"

    def verdict(self, request: web.Request) -> str:
        """ "operator", or why not: "foreign" (another site's page), "throttled" (too many wrong
        tokens, not checked), "wrong", "missing" (no token), "not local" (no token configured)."""
        if is_foreign_origin(request):
            return "foreign"
        if self.token:
            presented = self.presented(request)
            return self._checked(request, presented) if presented else "missing"
        return "operator" if is_local_direct(request) else "not local"

    def attempt(self, request: web.Request, token: str) -> str:
        """Check `token` as a login would: "operator", "wrong", "throttled" (not checked: too many
        wrong tokens) or "foreign" (another site's page)."""
        if is_foreign_origin(request):
            return "foreign"
        return self._checked(request, token)

    def retry_after(self, request: web.Request) -> int:
        """Whole seconds a throttled `request`'s address waits before its next try."""
        return max(1, math.ceil(self.throttle.retry_after(_address(request))))

    def _checked(self, request: web.Request, token: str) -> str:
        address = _address(request)
        if self.throttle.retry_after(address) > 0:
            self.throttle.refusing(address)
            return "throttled"
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return "operator"
        self.throttle.failed(address)
        return "wrong"

    def check(self, request: web.Request) -> web.Response | None:
        """None when `request` may use operator routes, else a 401/403/429 JSON response."""
        verdict = self.verdict(request)
        if verdict == "operator":
            return None
        if verdict == "throttled":
            return self.throttled(request)
        if self.token and verdict == "foreign":
            return web.json_response(
                {
                    "error": "operator routes do not answer pages of other sites (the request's "
                    "Origin is not this server), whatever token they carry"
                },
                status=403,
            )
        if self.token:
            return web.json_response(
                {"error": "operator token required: send Authorization: Bearer <xiaozhi.http.admin_token>"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="vixio"'},
            )
        return web.json_response(
            {
                "error": "operator routes answer only on this machine because no operator token is configured; "
                "set xiaozhi.http.admin_token (e.g. ${VIXIO_ADMIN_TOKEN}) to use them from elsewhere"
            },
            status=403,
        )

    def throttled(self, request: web.Request) -> web.Response:
        """The 429 for a request whose address (or everyone) sent too many wrong tokens."""
        wait = self.retry_after(request)
        return web.json_response(
            {"error": f"too many wrong operator tokens; try again in {wait} s"},
            status=429,
            headers={"Retry-After": str(wait)},
        )

    def protect(self, handler: Handler) -> Handler:
        """`handler`, answered only for operators."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            refusal = self.check(request)
            return refusal if refusal is not None else await handler(request)

        guarded.__name__ = getattr(handler, "__name__", "guarded")
        guarded.__doc__ = handler.__doc__
        return guarded


def _address(request: web.Request) -> str:
    return address_key((request.remote,)) if request.remote else "local"


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


def is_foreign_origin(request: web.Request) -> bool:
    """A browser sent `request` from a page of another site (its `Origin` is not this server)."""
    origin = request.headers.get("Origin")
    return origin is not None and not _same_origin(origin, request)


def _same_origin(origin: str, request: web.Request) -> bool:
    host = request.headers.get("Host", "")
    return bool(host) and origin.rstrip("/").lower() in (f"http://{host}".lower(), f"https://{host}".lower())
