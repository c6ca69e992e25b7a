"""Shared pieces of the hostile-client tests: a log capture, a bystander device whose turns must
stay fast while an attacker works, and a loopback HTTP endpoint that hangs and counts requests.

The log capture takes vixio's loguru records and the libraries' `logging` records (WARNING and up),
so a traceback printed by websockets or aiohttp counts too."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from loguru import logger

from vixio.app.server import VixioServer
from vixio.testing.device import SimulatedDevice

from .conftest import ws_url

TURN_BOUND = 5.0
"""Seconds a bystander's typed turn may take (about 0.1 s unloaded; generous for a busy CI box)."""


@dataclass
class LogRecord:
    level: str
    message: str
    traceback: bool
    extra: dict[str, Any]


@dataclass
class LogCapture:
    records: list[LogRecord] = field(default_factory=list)

    def lines(self, needle: str, level: str | None = None) -> list[LogRecord]:
        return [r for r in self.records if needle in r.message and (level is None or r.level == level)]

    def tracebacks(self) -> list[LogRecord]:
        return [r for r in self.records if r.traceback or r.level in ("ERROR", "CRITICAL")]


@asynccontextmanager
async def captured_logs(level: str = "DEBUG") -> AsyncIterator[LogCapture]:
    capture = LogCapture()

    def sink(message: Any) -> None:
        record = message.record
        capture.records.append(
            LogRecord(record["level"].name, record["message"], record["exception"] is not None, dict(record["extra"]))
        )

    class StdlibHandler(logging.Handler):
        """The libraries (websockets, aiohttp, asyncio) log through `logging`, not loguru."""

        def emit(self, record: logging.LogRecord) -> None:
            capture.records.append(
                LogRecord(record.levelname, record.getMessage(), record.exc_info is not None, {"logger": record.name})
            )

    sink_id = logger.add(sink, level=level, filter="vixio")
    handler = StdlibHandler(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield capture
    finally:
        root.removeHandler(handler)
        logger.remove(sink_id)


class Bystander:
    """An honest device in its own session; `turn()` times one typed exchange."""

    def __init__(self, server: VixioServer) -> None:
        self.device = SimulatedDevice(ws_url=ws_url(server), device_id="aa:bb:cc:00:00:01")
        self.durations: list[float] = []

    async def __aenter__(self) -> Bystander:
        await self.device.connect()
        await self.device.start_listening("auto")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.device.close()

    async def turn(self, text: str = "are you still there") -> float:
        mark = self.device.mark()
        started = time.monotonic()
        await self.device.send_text(text)
        await self.device.wait_for("stt", after=mark, timeout=TURN_BOUND)
        await self.device.wait_for("tts", state="stop", after=mark, timeout=TURN_BOUND)
        elapsed = time.monotonic() - started
        self.durations.append(elapsed)
        await self.device.wait_until_idle(timeout=TURN_BOUND)
        return elapsed


class HangingEndpoint:
    """An HTTP server on loopback that never answers; counts the requests it got."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _hang(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        await asyncio.sleep(3600)
        return web.Response()

    async def __aenter__(self) -> HangingEndpoint:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._hang)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def url(self, path: str = "/schema.json") -> str:
        return f"http://127.0.0.1:{self.port}{path}"
