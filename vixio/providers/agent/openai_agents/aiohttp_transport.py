"""An httpx2 transport over aiohttp, for the agent's calls to OpenAI-compatible servers.

The openai SDK speaks httpx2, whose default wire (httpcore2, h11, anyio) was ~40 % of an agent
turn's CPU, and whose pool polls every idle connection's socket on every request and response
close, more often the more sessions share it. aiohttp parses HTTP in C and hears of a closed idle
connection from the event loop. The SDK still sees httpx2 requests and responses (its status
errors, streams and retries are unchanged); only the wire is aiohttp's.

The SDK's own aiohttp transport (`DefaultAioHttpClient`) reports a refused connection as a
connect timeout, so the user would hear "timed out" for a server that is down. Here each aiohttp
error becomes the httpx2 error for what happened, most specific first, raised from the aiohttp
error (where `providers/failure.py` finds the OS error to name).
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import aiohttp
import httpx2

from vixio.patches import aiohttp as http_eager
from vixio.providers.prewarm import FRESH_FOR, Warmth, head

_FAILURES = (aiohttp.ClientError, TimeoutError, OSError)
"""What aiohttp raises for a request that failed (ServerTimeoutError is a TimeoutError)."""


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """One aiohttp session and connection pool, made on the loop of the first request (an aiohttp
    session belongs to the loop it was made on and has to be closed there: `aclose`).

    `limits` as httpx2's: at most `max_connections` at once, idle ones closed after
    `keepalive_expiry` s. aiohttp keeps every idle connection (no `max_keepalive_connections`).
    Proxies come from the environment (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY) when `trust_env`, read
    once as httpx2 reads them once per client (aiohttp's own `trust_env` asks a thread on every
    request).
    """

    def __init__(
        self,
        *,
        limits: httpx2.Limits,
        ssl_context: ssl.SSLContext | None = None,
        trust_env: bool = True,
        on_open: Callable[[AiohttpTransport], None] | None = None,
    ) -> None:
        self._limits = limits
        self._on_open = on_open
        """Told each time a pool is made (on the running loop), so its owner can close it there."""
        # httpx2's certificates (certifi, or SSL_CERT_FILE), so HTTPS servers are trusted as before.
        self._ssl = ssl_context or httpx2.create_ssl_context(trust_env=trust_env)
        self._proxies = urllib.request.getproxies_environment() if trust_env else {}
        self._proxy_of: dict[tuple[str, str], str | None] = {}
        self._session: aiohttp.ClientSession | None = None
        self.warmth = Warmth("the agent's model server", fresh_for=min(FRESH_FOR, limits.keepalive_expiry or FRESH_FOR))

    async def warm(self, url: str) -> bool:
        """A HEAD to `url` when the pool went cold (see providers/prewarm.py); True if sent."""
        return await self.warmth.warm(
            lambda: head(self._session or self._open(), url, proxy=self._proxy(httpx2.URL(url)))
        )

    def _open(self) -> aiohttp.ClientSession:
        http_eager.install()  # Python 3.11: the request is written before `request()` waits
        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=self._limits.keepalive_expiry,
            ssl=self._ssl,
        )
        # httpx2 keeps the cookies, follows redirects and decodes bodies itself.
        self._session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
        )
        if self._on_open is not None:
            self._on_open(self)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = self._session or self._open()
        self.warmth.used()
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()  # the SDK's JSON bodies are bytes already
        headers = [(name, value) for name, value in request.headers.multi_items() if name != "transfer-encoding"]
        try:
            response = await session.request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=_client_timeout(timeout.get("connect"), timeout.get("read"), timeout.get("pool")),
                proxy=self._proxy(request.url),
                server_hostname=request.extensions.get("sni_hostname"),
            )
        except _FAILURES as exc:
            raise httpx_error(exc, request) from _cause(exc)
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("ascii", "replace")
        return httpx2.Response(
            response.status,
            headers=response.raw_headers,
            request=request,
            stream=_ResponseStream(response, request, self.warmth),
            extensions=extensions,
        )

    def _proxy(self, url: httpx2.URL) -> str | None:
        """The proxy the environment names for `url`'s scheme and host, if any."""
        if not self._proxies:
            return None
        key = (url.scheme, url.host)
        if key not in self._proxy_of:
            proxy = self._proxies.get(url.scheme) or self._proxies.get("all")
            # proxy_bypass_environment is public in urllib.request but missing from typeshed's stub.
            bypass = proxy is not None and urllib.request.proxy_bypass_environment(url.host, self._proxies)  # type: ignore[attr-defined]
            self._proxy_of[key] = None if bypass else proxy
        return self._proxy_of[key]

    async def aclose(self) -> None:
        """Close the pool, on the loop it was made on (a later request makes a new one)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def discard(self) -> None:
        """Forget the pool of a loop that is closed (nothing can run on it any more) without
        aiohttp's "Unclosed client session" when it is garbage-collected."""
        session, self._session = self._session, None
        if session is None:
            return
        connector = session.connector
        session.detach()
        if connector is not None:
            # On a closed loop `close()` only marks the pool closed: its awaitable is done at once.
            next(connector.close().__await__(), None)


class _ResponseStream(httpx2.AsyncByteStream):
    """A response body, each piece as soon as aiohttp receives it: a streamed answer's events
    reach the agent when the server sends them, not when a buffer fills."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request, warmth: Warmth) -> None:
        self._response = response
        self._request = request
        self._warmth = warmth

    def __aiter__(self) -> _ResponseStream:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._response.content.readany()
        except _FAILURES as exc:
            raise httpx_error(exc, self._request) from exc
        if not chunk:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        # aiohttp pools the connection when the body was read to its end and closes it otherwise.
        self._response.release()
        self._warmth.used()


@lru_cache(maxsize=64)
def _client_timeout(connect: float | None, read: float | None, pool: float | None) -> aiohttp.ClientTimeout:
    """httpx2's limits in aiohttp's terms: `connect` for making a connection, `read` for each
    read (the response's head included), no limit on the whole (a streamed answer takes as long as
    it takes). aiohttp's own `connect` covers the wait for a pooled connection and then making
    one: httpx2's pool and connect limits one after the other. aiohttp has no write limit (the
    agent's requests are small JSON bodies)."""
    acquire = None if connect is None or pool is None else connect + pool
    return aiohttp.ClientTimeout(total=None, connect=acquire, sock_connect=connect, sock_read=read)


def httpx_error(exc: BaseException, request: httpx2.Request) -> httpx2.TransportError:
    """The httpx2 error for what the aiohttp error `exc` says happened. The SDK turns httpx2's
    timeouts into APITimeoutError and its other request errors into APIConnectionError; any other
    class would escape it unwrapped."""
    if isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        return httpx2.ProxyError(str(exc), request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, DNS, unreachable, TLS
        return httpx2.ConnectError(_connect_failure(exc), request=request)
    if isinstance(exc, aiohttp.ServerFingerprintMismatch):
        return httpx2.ConnectError(str(exc), request=request)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx2.ConnectTimeout(str(exc) or "timed out connecting", request=request)
    if isinstance(exc, TimeoutError):  # SocketTimeoutError: nothing read within `read`
        return httpx2.ReadTimeout(str(exc) or "timed out reading", request=request)
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpx2.UnsupportedProtocol(str(exc), request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        # The server closed early, cut the body short or sent something that is not HTTP.
        return httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=request)
    if isinstance(exc, aiohttp.ClientConnectionError | OSError):  # reset, broken pipe
        return httpx2.ReadError(str(exc) or type(exc).__name__, request=request)
    return httpx2.TransportError(str(exc) or type(exc).__name__, request=request)


def _cause(exc: BaseException) -> BaseException:
    """What an httpx2 error is raised from: the aiohttp error, or for a failed TLS handshake the
    `ssl` error itself, whose reason `failure.py` names (aiohttp's wrapper is an `ssl` error
    too, with no reason of its own; it stays the context)."""
    if isinstance(exc, aiohttp.ClientSSLError) and isinstance(exc.os_error, ssl.SSLError):
        return exc.os_error
    return exc


def _connect_failure(exc: aiohttp.ClientConnectorError) -> str:
    """`cannot connect to host:port: <why>`, without aiohttp's ConnectionKey and errno noise."""
    error = exc.os_error
    if isinstance(error, ssl.SSLError | ssl.CertificateError):
        why = getattr(error, "reason", None) or getattr(error, "verify_message", None) or str(error)
    elif isinstance(error.errno, int) and error.errno > 0:
        why = os.strerror(error.errno)
    else:  # getaddrinfo's errors have negative numbers and their own words
        why = error.strerror or str(error) or type(error).__name__
    return f"cannot connect to {exc.host}:{exc.port}: {why}"
