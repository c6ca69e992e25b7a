"""describe_failure: why a request to a provider's server failed, in words an operator can act on.

HTTP clients bury the cause: litellm reports a failed DNS lookup as "HTTP 500" (its
APIConnectionError carries a made-up status), aiohttp as `ClientConnectorError(ConnectionKey(...))`.
The cause is found in the exception chain (socket errors, aiohttp's `os_error`) or, where a
library kept only the message (litellm), in its text:

    DNS lookup failed for api.deepseek.com
    connection refused at 127.0.0.1:9000
    HTTP 401 Unauthorized: 'invalid key'; agent.api_key is empty (DEEPSEEK_API_KEY unset)

Used by the agent, ASR, TTS and vision providers alike. `failure_kind` sorts the same causes into
a few kinds for counting (`vixio_provider_errors_total{cause=...}` in `/metrics`).
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
from collections.abc import Iterator
from http import HTTPStatus
from typing import Literal
from urllib.parse import urlsplit

_DNS_TEXT = (
    "Name or service not known",
    "nodename nor servname",
    "Temporary failure in name resolution",
    "No address associated with hostname",
    "getaddrinfo failed",
)
_REFUSED_TEXT = ("Connection refused", "Errno 111", "ECONNREFUSED", "actively refused")
_MAX_DETAIL = 200

FailureKind = Literal[
    "dns", "refused", "tls", "timeout", "connection", "auth", "rate_limit", "http_4xx", "http_5xx", "other"
]
"""What kind of cause a provider failure had: a bounded set, so it can label a counter."""
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "dns",
    "refused",
    "tls",
    "timeout",
    "connection",
    "auth",
    "rate_limit",
    "http_4xx",
    "http_5xx",
    "other",
)
# The words of this module's descriptions (and the providers' own) that name a kind.
_TIMEOUT_TEXT = ("in time", "timed out", "did not answer within", "stalled", "no audio for")
_CONNECTION_TEXT = ("could not connect", "broke off", "could not reach", "Connection error")
_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


def describe_failure(
    url: str | None = None,
    *,
    exc: BaseException | None = None,
    status: int | None = None,
    detail: str = "",
    missing_key: str | None = None,
) -> str:
    """The cause of one failed request to `url`: a connection failure found in `exc`, else the
    HTTP `status` with `detail` (the body or the server's message), else the exception itself.
    The URL the failed request went to, when the exception knows it (httpx), names the host.

    `missing_key` names the API key that was not sent ("asr.api_key is empty"); it is added to
    every description, since a missing key is worth knowing whatever failed first.
    """
    cause = connection_failure(exc, url) if exc is not None else None
    if cause is None and status is not None and status >= 400:
        cause = f"HTTP {status} {_phrase(status)}" + (f": {detail[:_MAX_DETAIL]}" if detail else "")
    if cause is None and exc is not None:
        text = detail or _first_line(exc) or type(exc).__name__
        cause = text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"
    cause = cause or detail or "failed"
    return f"{cause}; {missing_key}" if missing_key else cause


def failure_kind(exc: BaseException) -> FailureKind:
    """The kind of cause of `exc` (a provider's error and what it was raised from): a failed
    connection found in the chain first, then the words of its description, then an HTTP status."""
    chain = list(_chain(exc))
    for error in chain:
        if isinstance(error, socket.gaierror) or type(error).__name__ == "ClientConnectorDNSError":
            return "dns"
        if (
            isinstance(error, ConnectionRefusedError)
            or isinstance(error, OSError)
            and error.errno == errno.ECONNREFUSED
        ):
            return "refused"
        if isinstance(error, ssl.SSLError | ssl.CertificateError):
            return "tls"
    text = " ".join(str(error) for error in chain)
    if "DNS lookup failed" in text or any(marker in text for marker in _DNS_TEXT):
        return "dns"
    if "connection refused" in text or any(marker in text for marker in _REFUSED_TEXT):
        return "refused"
    if "TLS handshake" in text:
        return "tls"
    if any(isinstance(error, TimeoutError) or "Timeout" in type(error).__name__ for error in chain) or any(
        marker in text for marker in _TIMEOUT_TEXT
    ):
        return "timeout"
    if any(marker in text for marker in _CONNECTION_TEXT) or any(
        isinstance(error, OSError) and error.errno is not None for error in chain
    ):
        return "connection"
    status = _status(chain, text)
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status is not None and 400 <= status < 500:
        return "http_4xx"
    if status is not None and status >= 500:
        return "http_5xx"
    return "other"


def _status(chain: list[BaseException], text: str) -> int | None:
    """The HTTP status a failed request got: in the words of its description, else one an
    exception of the chain carries (litellm's `status_code`, aiohttp's `status`)."""
    found = _HTTP_STATUS.search(text)
    if found:
        return int(found.group(1))
    for error in chain:
        for name in ("status_code", "status"):
            value = getattr(error, name, None)
            if isinstance(value, int) and 400 <= value < 600:
                return value
    return None


def host_port(url: str | None) -> tuple[str, int | None]:
    """The host and port of `url` (the scheme's default port when none is given)."""
    if not url:
        return "?", None
    parts = urlsplit(url if "//" in url else f"//{url}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and parts.scheme in ("http", "ws"):
        port = 80
    elif port is None and parts.scheme in ("https", "wss"):
        port = 443
    return parts.hostname or "?", port


def connection_failure(exc: BaseException, url: str | None = None) -> str | None:
    """What kept `exc`'s request from reaching the server (DNS, refused, TLS, connect timeout,
    another OS error), or None when it got there (or the exception does not say)."""
    chain = list(_chain(exc))
    host, port = host_port(_requested_url(chain) or url)
    where = f"{host}:{port}" if port else host
    for error in chain:
        if isinstance(error, socket.gaierror) or type(error).__name__ == "ClientConnectorDNSError":
            return f"DNS lookup failed for {host}"
        if (
            isinstance(error, ConnectionRefusedError)
            or isinstance(error, OSError)
            and error.errno == errno.ECONNREFUSED
        ):
            return f"connection refused at {where}"
        if isinstance(error, ssl.SSLError | ssl.CertificateError):
            return f"TLS handshake with {where} failed: {getattr(error, 'reason', None) or _first_line(error)}"
    text = " ".join(_first_line(error) for error in chain)
    if any(marker in text for marker in _DNS_TEXT):
        return f"DNS lookup failed for {host}"
    if any(marker in text for marker in _REFUSED_TEXT):
        return f"connection refused at {where}"
    if any(isinstance(error, TimeoutError) or "Timeout" in type(error).__name__ for error in chain):
        return f"no answer from {where} in time"
    for error in chain:
        if isinstance(error, OSError) and error.errno is not None:
            return f"could not connect to {where}: {error.strerror or error}"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, its causes and contexts, and the OS error aiohttp keeps beside them."""
    seen: set[int] = set()
    pending = [exc]
    while pending and len(seen) < 20:
        error = pending.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        for linked in (error.__cause__, error.__context__, getattr(error, "os_error", None)):
            if isinstance(linked, BaseException):
                pending.append(linked)


def _requested_url(chain: list[BaseException]) -> str | None:
    """The URL of the request an HTTP client's exception of the chain failed; litellm's own
    exceptions carry placeholder requests, so only httpx's and aiohttp's are asked."""
    for error in chain:
        module = type(error).__module__.split(".")[0]
        if module == "httpx":
            try:
                return str(error.request.url)  # type: ignore[attr-defined]
            except (AttributeError, RuntimeError):  # httpx raises when it has no request
                continue
        host, port = getattr(error, "host", None), getattr(error, "port", None)
        if module == "aiohttp" and isinstance(host, str) and isinstance(port, int):
            return f"//{host}:{port}"
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:_MAX_DETAIL] if lines else ""


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
