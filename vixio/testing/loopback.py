"""LoopbackServer: an aiohttp app on a free loopback port, for the test servers in vixio.testing.

class MyServer(LoopbackServer):
    def build_app(self) -> web.Application: ...

async with MyServer() as server:
    client(base_url=server.base_url)     # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

from aiohttp import web
from loguru import logger


class LoopbackServer(ABC):
    """Starts `build_app()` on `host` and `port` (0: a free one); `stop()` is safe when not started."""

    label = "test server"
    """Named in the debug line logged once listening."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, shutdown_timeout: float = 0.5) -> None:
        self._host = host
        self._bind_port = port
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        self.port = 0
        """The bound port (after `start()`)."""

    @abstractmethod
    def build_app(self) -> web.Application:
        """The aiohttp application with this server's routes."""

    async def start(self) -> Self:
        """Listen on a free loopback port."""
        self._runner = web.AppRunner(self.build_app(), access_log=None, shutdown_timeout=self._shutdown_timeout)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._bind_port).start()
        self.port = int(self._runner.addresses[0][1])
        logger.debug("{} listening on {}", self.label, self.base_url)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """E.g. `http://127.0.0.1:41234/v1`, what OpenAI clients take as base URL."""
        return f"http://{self._host}:{self.port}/v1"
