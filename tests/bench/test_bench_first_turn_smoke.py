"""bench/bench_first_turn.py's stand-in for the network: the delaying proxy delays each direction
by half a round trip and a new connection's first bytes by its set-up round trips more."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from bench_first_turn import DelayingProxy  # noqa: E402

pytestmark = pytest.mark.integration


async def test_a_new_connection_pays_its_set_up_round_trips_once_then_one_round_trip_per_exchange() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    proxy = DelayingProxy(("127.0.0.1", server.sockets[0].getsockname()[1]), rtt=0.1, setup_rtts=2)
    port = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        times = []
        for message in (b"first", b"second", b"third"):
            started = time.monotonic()
            writer.write(message)
            assert await reader.readexactly(len(message)) == message
            times.append(time.monotonic() - started)
        writer.close()
        assert 0.3 <= times[0] < 0.45  # 2 set-up round trips + the exchange's own
        assert all(0.1 <= t < 0.2 for t in times[1:])
        assert proxy.connections == 1
    finally:
        await proxy.stop()
        server.close()
