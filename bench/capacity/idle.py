"""The connected-idle devices of bench/bench_idle.py: thousands of sockets in one process.

Each device does what firmware 2.4.2 does between conversations: it opens the WebSocket with
the firmware's headers, sends its hello (`features.mcp`), answers the server's MCP
`initialize` and `tools/list` with the firmware's six tools (vixio/testing/device/tools.py), then
keeps the socket open and sends nothing (the WebSocket library answers the server's pings, as
the firmware's does). A device counts as connected once its last `tools/list` page is answered.

Run as a child of the benchmark: `python bench/capacity/idle.py <ws url>`; it reads commands on
stdin, one a line, and answers each with one JSON line on stdout:

- `add K`: connect K more devices (at most `CONNECTING` at a time); answers
  `{"connected": total, "failed": [...], "seconds": ..., "hello_ms": {"p50":..., "p95":...}}`;
- `quit` (or end of input): close every socket and exit.

The soft RLIMIT_NOFILE is raised to the hard limit first (one descriptor per device).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import websockets
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vixio.testing.device.mcp import DeviceMcpServer  # noqa: E402
from vixio.testing.device.tools import DeviceStatus, default_tools  # noqa: E402

CONNECTING = 100
"""Handshakes in flight at once: a fleet reconnecting after an outage is spread out by the
firmware's retry timers, not all in the same millisecond."""
LISTED_TIMEOUT_S = 60.0
FIRST_INDEX = 1 << 20
"""Idle devices' ids start here, apart from the talking devices of bench/capacity/load.py."""


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class IdleDevice:
    """One silent firmware-like device: hello, MCP initialize + tools/list answered, then nothing."""

    def __init__(self, index: int, url: str) -> None:
        self.url = url
        self.device_id = "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}".format(*index.to_bytes(5, "big"))
        self.client_id = str(uuid.UUID(int=index + 1))
        self.session_id = ""
        self.listed = asyncio.Event()
        self.unexpected: list[str] = []
        """Messages an idle device should never get after its MCP listing (audio, tts, ...)."""
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self.mcp = DeviceMcpServer(
            default_tools(DeviceStatus(), lambda: {"board": "bench"}, lambda: None),
            board="bench-board",
            firmware_version="2.4.2",
            send=self._send_mcp,
            device_id=self.device_id,
        )

    async def connect(self) -> float:
        """Connect, say hello and wait until the MCP listing is answered; returns the hello round trip (s)."""
        headers = {"Protocol-Version": "1", "Device-Id": self.device_id, "Client-Id": self.client_id}
        started = time.monotonic()
        self._ws = await websockets.connect(
            self.url, additional_headers=headers, open_timeout=30, ping_interval=None, compression=None, max_size=2**20
        )
        self._hello = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._receive())
        await self._ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "version": 1,
                    "features": {"mcp": True},
                    "transport": "websocket",
                    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
                }
            )
        )
        hello = await asyncio.wait_for(self._hello, 30)
        hello_s = time.monotonic() - started
        self.session_id = str(hello.get("session_id") or "")
        await asyncio.wait_for(self.listed.wait(), LISTED_TIMEOUT_S)
        return hello_s

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _send_mcp(self, payload: dict[str, Any]) -> None:
        try:
            await self._ws.send(json.dumps({"session_id": self.session_id, "type": "mcp", "payload": payload}))
        except ConnectionClosed:
            return
        result = payload.get("result")
        if isinstance(result, dict) and "tools" in result and not result.get("nextCursor"):
            self.listed.set()

    async def _receive(self) -> None:
        try:
            async for frame in self._ws:
                if isinstance(frame, bytes):
                    self.unexpected.append("audio")
                    continue
                message = json.loads(frame)
                kind = message.get("type")
                if kind == "hello" and self._hello is not None and not self._hello.done():
                    self._hello.set_result(message)
                elif kind == "mcp":
                    await self.mcp.handle(message.get("payload"))
                elif self.listed.is_set():
                    self.unexpected.append(str(kind))
        except ConnectionClosed:
            pass
        finally:
            if self._hello is not None and not self._hello.done():
                self._hello.set_exception(ConnectionError("closed before the server hello"))


class Fleet:
    """Every idle device of this process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.devices: list[IdleDevice] = []

    async def add(self, count: int) -> dict[str, Any]:
        gate = asyncio.Semaphore(CONNECTING)
        hellos: list[float] = []
        failed: list[str] = []
        started = time.monotonic()

        async def one(device: IdleDevice) -> None:
            async with gate:
                try:
                    hellos.append(await device.connect())
                except (OSError, TimeoutError, ConnectionError, ConnectionClosed, websockets.InvalidHandshake) as exc:
                    failed.append(f"{type(exc).__name__}: {exc}"[:200])

        first = FIRST_INDEX + len(self.devices)
        batch = [IdleDevice(first + i, self.url) for i in range(count)]
        self.devices.extend(batch)
        await asyncio.gather(*(one(d) for d in batch))
        unexpected: dict[str, int] = {}
        for device in self.devices:
            for kind in device.unexpected:
                unexpected[kind] = unexpected.get(kind, 0) + 1
        return {
            "connected": sum(1 for d in self.devices if d.listed.is_set()),
            "failed": failed[:5],
            "failed_count": len(failed),
            "seconds": round(time.monotonic() - started, 2),
            "hello_ms": {"p50": _ms_pct(hellos, 50), "p95": _ms_pct(hellos, 95)},
            "unexpected": unexpected,
            "cpu_s": round(time.process_time(), 2),
        }

    async def close(self) -> None:
        gate = asyncio.Semaphore(500)

        async def one(device: IdleDevice) -> None:
            async with gate:
                await device.close()

        await asyncio.gather(*(one(d) for d in self.devices), return_exceptions=True)


def _ms_pct(values: list[float], q: float) -> float | None:
    return round(1000 * float(np.percentile(values, q)), 1) if values else None


async def _main(url: str) -> None:
    fleet = Fleet(url)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := (await reader.readline()).decode().strip():
            command, _, argument = line.partition(" ")
            if command == "quit":
                break
            if command == "add":
                answer = await fleet.add(int(argument))
            else:
                answer = {"error": f"unknown command {command!r}"}
            print(json.dumps(answer), flush=True)
    finally:
        await fleet.close()


def main() -> None:
    raise_nofile()
    asyncio.run(_main(sys.argv[1]))


if __name__ == "__main__":
    main()
