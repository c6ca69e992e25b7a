"""Which names are this server's: for the URLs handed to devices, and for operator routes.

A request's `Host` header is chosen by whoever sends the request, so it is used only when it
names this server: the local address the request arrived on, a loopback name, or a name in
`xiaozhi.allowed_hosts`. Otherwise the address the request arrived on is used — the device
reached us through it, so on a LAN it reaches the WebSocket port through it too. Behind a proxy
or NAT the operator sets `public_url`.

Operator routes (`ServerNames.refuses`) answer only a `Host` that names this server: a web page
that rebinds its own name to 127.0.0.1 (DNS rebinding) reaches the port from the operator's
browser, but its requests still carry its own name.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web
from loguru import logger
from yarl import URL

from vixio.core.log_throttle import LogThrottle

if TYPE_CHECKING:
    from vixio.config.xiaozhi import XiaozhiConfig

VISION_PATH = "/mcp/vision/explain"
"""Where a camera device uploads a photo for `self.camera.take_photo` (same path as xiaozhi servers)."""

_LOOPBACK_NAMES = {"localhost"}


def host_of(host_header: str) -> str | None:
    """The host part of a `Host` header value ("192.168.1.5:8003" → "192.168.1.5"), or None."""
    value = host_header.strip()
    if not value or len(value) > 255:
        return None
    try:
        host = URL(f"http://{value}/").host
    except ValueError:
        return None
    return host or None


def names_this_server(host: str, local_address: str | None, allowed_hosts: Iterable[str] = ()) -> bool:
    """Whether `host` (from a Host header) names this server."""
    lowered = host.lower().rstrip(".")
    if lowered in _LOOPBACK_NAMES or lowered.endswith(".localhost"):
        return True  # browsers resolve these to loopback themselves: no page can own one
    if lowered in {h.lower().rstrip(".") for h in allowed_hosts}:
        return True
    try:
        ip = ipaddress.ip_address(lowered.strip("[]"))
    except ValueError:
        return False
    if ip.is_loopback:
        return True
    if local_address is None:
        return False
    try:
        local = ipaddress.ip_address(local_address.split("%")[0])
    except ValueError:
        return False
    if isinstance(local, ipaddress.IPv6Address) and local.ipv4_mapped is not None:
        local = local.ipv4_mapped
    return ip == local


class ServerNames:
    """The names a request for an operator route may address this server by: its addresses,
    loopback names, this machine's host name, `xiaozhi.allowed_hosts`, and the hosts of
    `public_url` and `mcp.vision_url` (a proxy that passes the public name on)."""

    def __init__(self, config: XiaozhiConfig) -> None:
        names = [*config.allowed_hosts]
        for url in (config.public_url, config.mcp.vision_url):
            if url:
                host = urlsplit(url).hostname
                if host:
                    names.append(host)
        machine = socket.gethostname().lower()
        if machine:
            names += [machine, machine + ".local"]
        self.names = tuple(names)
        self._refused = LogThrottle(first=3, every=60.0)

    def refusal(self, request: web.Request) -> web.Response | None:
        """None when `request` is addressed to this server, else the 403 to answer. A refusal is
        logged a few times, then once a minute with a count: it is a rebinding page, or a proxy
        passing on a name the operator did not list."""
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        host = request.headers.get("Host")
        if not self.refuses(host, str(sockname[0]) if sockname else None):
            return None
        shown = (host or "")[:100]
        count = self._refused.hit()
        if count is not None:
            logger.warning(
                "HTTP: refused {} {} addressed to Host {!r}, not a name of this server{}; add the name to "
                "xiaozhi.allowed_hosts if it is one",
                request.method,
                request.path,
                shown,
                f" ({count} such requests since the last line)" if count else "",
            )
        return web.json_response(
            {
                "error": f"Host {shown!r} does not name this server: operator routes answer only "
                "its own addresses, localhost and xiaozhi.allowed_hosts"
            },
            status=403,
        )

    def refuses(self, host_header: str | None, local_address: str | None) -> bool:
        """Whether a request with this `Host` (None: no header) must be refused an operator
        route. Without a Host header the caller is no browser (every browser sends one)."""
        if host_header is None:
            return False
        host = host_of(host_header)
        return host is None or not names_this_server(host, local_address, self.names)


def advertised_host(
    host_header: str, local_address: str | None, fallback: str, allowed_hosts: Iterable[str] = ()
) -> str:
    """The host to put into a URL for the client that sent `host_header` over a connection to
    `local_address`: the header's host when it names this server, else `local_address`, else
    `fallback`."""
    host = host_of(host_header)
    if host is not None and names_this_server(host, local_address, allowed_hosts):
        return host
    if local_address:
        local = local_address.split("%")[0]
        if local.startswith("::ffff:") and "." in local:
            local = local.removeprefix("::ffff:")
        if local not in ("0.0.0.0", "::", ""):
            return local
    return fallback


def derive_vision_url(
    config: XiaozhiConfig, host_header: str = "", http_port: int | None = None, *, local_address: str | None = None
) -> str:
    """`mcp.vision_url`, else the HTTP server the device can reach plus `VISION_PATH`.

    With `public_url` (a proxy in front) the vision route is assumed behind the same origin;
    otherwise it is the host the device dialled (its handshake `Host`, when that names this
    server — see hosts.py — else the address the connection arrived on), on the HTTP port.
    """
    if config.mcp.vision_url:
        return config.mcp.vision_url
    if config.public_url:
        parts = urlsplit(config.public_url)
        scheme = "https" if parts.scheme in ("wss", "https") else "http"
        return urlunsplit((scheme, parts.netloc, VISION_PATH, "", ""))
    fallback = "127.0.0.1" if config.http.host in ("", "0.0.0.0", "::") else config.http.host
    host = advertised_host(host_header, local_address, fallback, ServerNames(config).names)
    port = http_port or config.http.port
    return str(URL.build(scheme="http", host=host, port=port, path=VISION_PATH))
