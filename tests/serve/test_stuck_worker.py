"""A worker whose event loop is stuck (here frozen with SIGSTOP: its process and channel remain)
gets no new device while another worker's loop turns, and the supervisor's `/healthz` answers 503
while no worker's loop turns, so a balancer sends the devices elsewhere (vixio/serve/dispatch.py).
Real `vixio serve` processes, simulated devices, real redis-server and HAProxy."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing import redis_server
from vixio.testing.device import SimulatedDevice
from vixio.testing.fleet import MISSING, Fleet, haproxy_path
from vixio.testing.serve import ServeProcess, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

NEEDS_REDIS = pytest.mark.skipif(redis_server.missing() is not None, reason=str(redis_server.missing()))


def worker_pids(serve: ServeProcess) -> list[int]:
    started = re.search(r"starting \d+ workers \(pids ([\d, ]+)\)", serve.text())
    assert started, serve.text()
    return [int(pid) for pid in started[1].split(", ")]


async def healthz(serve: ServeProcess) -> int:
    async with aiohttp.ClientSession() as http, http.get(serve.base_url + "/healthz") as response:
        return response.status


async def waited(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll `condition` for up to `timeout` s; whether it came true (the test goes on either way,
    so it fails on what the devices see)."""
    with suppress(AssertionError):
        return await until(lambda: asyncio.sleep(0.2, condition()), timeout, "")
    return False


async def hellos(ota_url: str, count: int, prefix: str) -> list[str]:
    """`count` new devices connect at once; the session ids of their server hellos (HelloError if one
    gets none within the firmware's 10 s)."""

    async def one(number: int) -> str:
        async with SimulatedDevice(ota_url=ota_url, device_id=f"{prefix}:{number:02x}") as device:
            await device.connect()
            return device.session_id

    return await asyncio.gather(*(one(n) for n in range(count)))


@NEEDS_REDIS
async def test_healthz_answers_503_while_the_only_worker_is_frozen_and_200_once_it_thaws(
    tmp_path: Path, redis: redis_server.RedisServer
) -> None:
    # A fleet member runs the supervisor even with one worker: it answers /healthz for it.
    serve = await start_serve(
        tmp_path,
        None,
        "--workers",
        "1",
        server="instance: solo",
        extra=f"state: {{backend: redis, url: '{redis.url}', fleet_secret: '{redis_server.FLEET_SECRET}'}}\n",
    )
    try:
        await serve.wait_ready()
        [worker] = worker_pids(serve)
        assert await healthz(serve) == 200
        os.kill(worker, signal.SIGSTOP)
        frozen = asyncio.get_running_loop().time()

        async def answers(status: int) -> bool:
            return await healthz(serve) == status

        await until(lambda: answers(503), 10, "/healthz to answer 503")
        assert asyncio.get_running_loop().time() - frozen < 6
        for _ in range(10):  # probes keep coming: one log line, not one per probe
            assert await healthz(serve) == 503
            await asyncio.sleep(0.1)
        os.kill(worker, signal.SIGCONT)
        await until(lambda: answers(200), 10, "/healthz to answer 200 again")
        assert await waited(lambda: "/healthz answers 200 again" in serve.text(), 5), (
            serve.text()
        )  # checked every 0.5 s
        log = serve.text()
        assert log.count("no worker's event loop turns") == 1, log
        assert log.count("worker w0's event loop has not turned") == 1, log
        assert "a worker's event loop turns: /healthz answers 200 again" in log, log
        assert "Traceback" not in log
    finally:
        serve.kill_group()


async def test_with_one_of_two_workers_frozen_every_new_device_gets_its_hello(tmp_path: Path) -> None:
    serve = await start_serve(tmp_path, None, "--workers", "2")
    try:
        ota_url = await serve.wait_ready()
        first, _ = worker_pids(serve)
        os.kill(first, signal.SIGSTOP)
        try:
            seen = await waited(lambda: "worker w0's event loop has not turned" in serve.text(), 10)
            assert len(set(await hellos(ota_url, 6, "02:00:00:00:5a"))) == 6
            assert seen, serve.text()
            assert await healthz(serve) == 200  # the other worker's loop turns
        finally:
            os.kill(first, signal.SIGCONT)
        assert "Traceback" not in serve.text()
    finally:
        serve.kill_group()


@NEEDS_REDIS
@pytest.mark.skipif(haproxy_path() is None, reason=MISSING)
async def test_haproxy_sends_no_new_device_to_an_instance_whose_only_worker_is_frozen(
    tmp_path: Path, redis: redis_server.RedisServer
) -> None:
    async with Fleet(
        tmp_path,
        None,
        instances=2,
        workers=1,
        extra=f"state: {{backend: redis, url: '{redis.url}', fleet_secret: '{redis_server.FLEET_SECRET}'}}\n",
    ) as fleet:
        stuck = fleet.instances[0]
        [worker] = worker_pids(stuck)
        os.kill(worker, signal.SIGSTOP)
        try:
            # The shipped checks (every 2 s, down after 2 failures) see the 503 within seconds.
            haproxy = fleet.haproxy
            assert haproxy is not None
            down = await waited(lambda: "vixio_websocket/vixio1 is DOWN" in haproxy.text(), 20)
            assert len(set(await hellos(fleet.ota_url, 6, "02:00:00:00:5b"))) == 6
            assert down, haproxy.text()
        finally:
            os.kill(worker, signal.SIGCONT)
