"""aiohttp: an `AppRunner` whose low-level server is vixio's own `web.Server` subclass.

The HTTP port's connection cap (`transports/xiaozhi/http/limits.py`) is a `web.Server` subclass
that admits or refuses each socket before aiohttp builds anything for it. aiohttp has no
documented way to give an `AppRunner` another server class: `AppRunner._make_server` builds a
`web.Server` from the application, with settings (keep-alive timeout, access log, request
factory options...) kept in its private `_kwargs`. `ServerClassRunner` overrides that method and
rebuilds the server as the subclass with the same settings. Upstream would need an
`AppRunner(server_class=...)` argument (or `_kwargs` made public).

This is a reliance vixio cannot run without (the cap guards the process's file descriptors), so
`VIXIO_NO_PATCHES` does not remove it; `tests/patches/test_aiohttp_shape.py` fails when an aiohttp
release changes either name. Checked on aiohttp 3.9 to 3.14.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

DISTRIBUTION = "aiohttp"
CHECKED = ("3.",)
"""aiohttp versions checked (prefixes)."""


class ServerClassRunner(web.AppRunner):
    """`web.AppRunner` serving with `server_class(handler, **server_arguments, **aiohttp's own settings)`."""

    server_class: type[web.Server] = web.Server

    def server_arguments(self) -> dict[str, Any]:
        """Keyword arguments of `server_class` beyond aiohttp's own (for a subclass to fill)."""
        return {}

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        return self.server_class(server.request_handler, request_factory=server.request_factory,
                                 handler_cancellation=server.handler_cancellation,
                                 **self.server_arguments(), **server._kwargs)
