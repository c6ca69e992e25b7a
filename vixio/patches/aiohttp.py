"""aiohttp: the request-body writer started eagerly on Python 3.11, and an `AppRunner` whose
low-level server is vixio's own `web.Server` subclass.

**Eager body writer** (`install()`, a patch). aiohttp writes a request's body (with the headers it
buffered) from a task of its own. On Python 3.12+ it starts that task eagerly, so a small body
(an ASR upload, a TTS request, an agent request) is written before `post()` goes on; on 3.11 the
task waits for the next loop iteration. On a busy server an iteration is ~10-15 ms (200 devices
on 2 cores), and every ASR and TTS request of a turn waits for one before its server even sees
the request. `install()` gives `aiohttp.client_reqrep` (and only it) an `asyncio` whose
`create_task` does what `eager_start=True` does (`core/eager.py`): the first step runs at once;
what is left continues in a task (6 -> 5 loop iterations per request on loopback). Checked on
aiohttp 3.14, needed on Python 3.11 only. Upstream would need the eager start on 3.11 too (a
`loop.create_task` with an eager task factory).

**Server class** (`ServerClassRunner`, a private reliance). The HTTP port's connection cap (`transports/xiaozhi/http/limits.py`) is a `web.Server` subclass
that admits or refuses each socket before aiohttp builds anything for it. aiohttp has no
documented way to give an `AppRunner` another server class: `AppRunner._make_server` builds a
`web.Server` from the application, with settings (keep-alive timeout, access log, request
factory options...) kept in its private `_kwargs`. `ServerClassRunner` overrides that method and
rebuilds the server as the subclass with the same settings. Upstream would need an
`AppRunner(server_class=...)` argument (or `_kwargs` made public).

The runner is a reliance vixio cannot run without (the cap guards the process's file descriptors), so
`VIXIO_NO_PATCHES` does not remove it; `tests/patches/test_aiohttp_shape.py` fails when an aiohttp
release changes either name. Checked on aiohttp 3.9 to 3.14.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import types
from collections.abc import Coroutine
from typing import Any

from aiohttp import web
from loguru import logger

from vixio.core.eager import eager_task
from vixio.patches import allowed, load

DISTRIBUTION = "aiohttp"
CHECKED = ("3.14.",)
"""aiohttp versions the eager body writer was checked against (prefixes); `ServerClassRunner`
relies on names aiohttp has kept since 3.9."""
_MODULE = "aiohttp.client_reqrep"


def install() -> bool:
    """Patch once; True when aiohttp's body writer starts eagerly (or needs no patch)."""
    if sys.version_info >= (3, 12):
        return True
    if not allowed(DISTRIBUTION, CHECKED, "request bodies (written a loop iteration later on Python 3.11)"):
        return False
    module = load(_MODULE)
    if not isinstance(module.asyncio, _EagerAsyncio):
        module.asyncio = _EagerAsyncio()
        logger.debug("aiohttp: request bodies are written without waiting for a loop iteration")
    return True


class _EagerAsyncio(types.ModuleType):
    """`asyncio`, but `create_task` starts the coroutine eagerly."""

    def __init__(self) -> None:
        super().__init__("asyncio")

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    def create_task(
        coro: Coroutine[Any, Any, Any], *, name: str | None = None, context: contextvars.Context | None = None
    ) -> asyncio.Future[Any]:
        return eager_task(coro, name=name, context=context)


class ServerClassRunner(web.AppRunner):
    """`web.AppRunner` serving with `server_class(handler, **server_arguments, **aiohttp's own settings)`."""

    server_class: type[web.Server] = web.Server

    def server_arguments(self) -> dict[str, Any]:
        """Keyword arguments of `server_class` beyond aiohttp's own (for a subclass to fill)."""
        return {}

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        return self.server_class(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            **self.server_arguments(),
            **server._kwargs,
        )
