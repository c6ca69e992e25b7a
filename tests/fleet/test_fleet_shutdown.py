"""A fleet instance stops promptly even when its Redis has stopped answering (a frozen server,
a network partition): every step of the shutdown is bounded (vixio/app/shutdown.py) and the
worker's leave from the bus's members gives up after `LEAVE_TIMEOUT`. Real processes, a real
redis-server frozen with SIGSTOP (its sockets stay open and nothing comes back)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from tests.fleet.test_fleet import start_instance
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.redis_server import RedisServer

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]


async def test_an_instance_whose_redis_froze_still_stops_within_seconds(tmp_path: Path, redis: RedisServer) -> None:
    serve = await start_instance(tmp_path, "a", redis, None)
    assert redis.process is not None
    try:
        await serve.wait_ready()
        async with SimulatedDevice(ws_url=serve.ws_url, device_id="aa:bb:cc:dd:ee:41", mcp=False) as device:
            await device.connect()
        os.kill(redis.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(serve.process.wait(), 30)
        took = time.monotonic() - started
    finally:
        os.kill(redis.process.pid, signal.SIGCONT)
        serve.kill_group()
    text = serve.text()
    # Before the bound, the worker's leave from the bus waited 10 s on the frozen server.
    assert took < 7.0, f"stopped after {took:.1f} s:\n{text}"
    assert serve.process.returncode == 0, text
    assert "all workers stopped" in text and "Traceback" not in text, text
