"""The server side for simulated-device tests: a hand-driven loopback Xiaozhi WebSocket server.

A test accepts the device's connection, reads exactly what the device sent (text and
binary, in arrival order, with times) and answers message by message, so every assertion
is about bytes on a real socket. OTA endpoints are small aiohttp apps built in the tests.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from vixio.transports.xiaozhi.protocol.codec import OpusEncoder
from vixio.transports.xiaozhi.protocol.framing import pack

SESSION = "5f0c9a7e-session"
SERVER_HELLO: dict[str, Any] = {
    "type": "hello",
    "version": 1,
    "transport": "websocket",
    "session_id": SESSION,
    "audio_params": {"format": "opus", "sample_rate": 24000, "channels": 1, "frame_duration": 60},
}
FRAME_S = 0.06


@functools.cache
def downlink_packets(count: int, *, sample_rate: int = 24000, frame_ms: int = 60) -> tuple[bytes, ...]:
    """`count` real Opus packets of a tone, as a server's TTS would send them."""
    import numpy as np

    encoder = OpusEncoder(sample_rate=sample_rate, channels=1, frame_duration_ms=frame_ms)
    t = np.arange(encoder.frame_samples * count) / sample_rate
    pcm = (np.sin(2 * np.pi * 330 * t) * 8000).astype("<i2").tobytes()
    size = encoder.frame_bytes
    return tuple(encoder.encode(pcm[i * size : (i + 1) * size]) for i in range(count))


class DeviceConnection:
    """One device connection as the server sees it."""

    def __init__(self, ws: ServerConnection) -> None:
        assert ws.request is not None  # set once the handshake completed
        self.ws = ws
        self.headers = ws.request.headers
        self.path = ws.request.path
        self.events: list[tuple[float, str, Any]] = []
        """(arrival time, "text" | "binary", parsed JSON or bytes), in arrival order."""
        self.closed = asyncio.Event()
        self._json: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue()

    def on_message(self, message: str | bytes) -> None:
        now = time.monotonic()
        if isinstance(message, str):
            data = json.loads(message)  # the device must only send JSON text
            self.events.append((now, "text", data))
            self._json.put_nowait((now, data))
        else:
            self.events.append((now, "binary", message))

    @property
    def binaries(self) -> list[bytes]:
        return [data for _, kind, data in self.events if kind == "binary"]

    async def next_json_timed(
        self, type: str | None = None, *, state: str | None = None, timeout: float = 5.0
    ) -> tuple[float, dict[str, Any]]:
        """The next JSON message of this type/state, skipping others; with its arrival time."""
        async with asyncio.timeout(timeout):
            while True:
                when, data = await self._json.get()
                if (type is None or data.get("type") == type) and (state is None or data.get("state") == state):
                    return when, data

    async def next_json(
        self, type: str | None = None, *, state: str | None = None, timeout: float = 5.0
    ) -> dict[str, Any]:
        return (await self.next_json_timed(type, state=state, timeout=timeout))[1]

    async def expect_no_json(self, seconds: float) -> None:
        """Assert the device sends no JSON for `seconds`."""
        try:
            async with asyncio.timeout(seconds):
                _, data = await self._json.get()
        except TimeoutError:
            return
        raise AssertionError(f"device sent {data} but should have stayed quiet")

    async def send_json(self, data: Any) -> None:
        await self.ws.send(json.dumps(data, ensure_ascii=False))

    async def handshake(self, **overrides: Any) -> dict[str, Any]:
        """Read the device hello and answer with SERVER_HELLO (+ overrides); returns the device hello."""
        hello = await self.next_json("hello")
        await self.send_json({**SERVER_HELLO, **overrides})
        return hello

    async def tts(self, state: str, **fields: Any) -> None:
        await self.send_json({"session_id": SESSION, "type": "tts", "state": state, **fields})

    async def send_frames(
        self, packets: tuple[bytes, ...] | list[bytes], *, version: int = 1, prebuffer: int | None = None
    ) -> None:
        """Send Opus packets; with `prebuffer`, that many at once and then one per 60 ms."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for index, packet in enumerate(packets):
            if prebuffer is not None and index >= prebuffer:
                await asyncio.sleep(max(0.0, start + (index - prebuffer + 1) * FRAME_S - loop.time()))
            await self.ws.send(pack(packet, version))

    async def mcp(self, payload: Any) -> None:
        await self.send_json({"session_id": SESSION, "type": "mcp", "payload": payload})

    async def mcp_reply(self, timeout: float = 5.0) -> dict[str, Any]:
        message = await self.next_json("mcp", timeout=timeout)
        assert message["session_id"] == SESSION
        return message["payload"]

    async def call(self, request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            payload["params"] = params
        await self.mcp(payload)
        return await self.mcp_reply()


class LoopbackServer:
    """A WebSocket server on 127.0.0.1 that hands each device connection to the test."""

    def __init__(self) -> None:
        self._server: Server | None = None
        self._accepted: asyncio.Queue[DeviceConnection] = asyncio.Queue()

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def ws_url(self) -> str:
        assert self._server is not None
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}/xiaozhi/v1/"

    async def accept(self, timeout: float = 5.0) -> DeviceConnection:
        async with asyncio.timeout(timeout):
            return await self._accepted.get()

    async def _handle(self, ws: ServerConnection) -> None:
        connection = DeviceConnection(ws)
        self._accepted.put_nowait(connection)
        try:
            async for message in ws:
                connection.on_message(message)
        except ConnectionClosed:
            pass
        finally:
            connection.closed.set()


@pytest.fixture
async def server() -> AsyncIterator[LoopbackServer]:
    loopback = LoopbackServer()
    await loopback.start()
    yield loopback
    await loopback.stop()


StartHttp = Callable[[web.Application], Awaitable[str]]


@pytest.fixture
async def start_http() -> AsyncIterator[StartHttp]:
    """Serve an aiohttp app on a free loopback port; returns its base URL."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()
