"""Activation v2 across a fleet: two `vixio serve` instances on one real redis-server. The device
gets its challenge from one instance's OTA and the load balancer sends its /activate poll to the
other, which has the issuing instance check the proof over the bus.
Without the `redis-server` package these tests skip, naming it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.state.redis import RedisStore
from vixio.testing.redis_server import FLEET_SECRET, RedisServer
from vixio.testing.serve import ServeProcess, start_serve

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

SERIAL = "SN-FLEET-0000000000000000000001"
KEY = bytes(range(7, 39))
DEVICE = "aa:bb:cc:dd:ee:42"
HEADERS = {
    "Device-Id": DEVICE,
    "Client-Id": "0f3c1a2b-1111-4222-8333-444455556642",
    "Activation-Version": "2",
    "Serial-Number": SERIAL,
    "Content-Type": "application/json",
}


async def start_instance(tmp_path: Path, name: str, redis: RedisServer) -> ServeProcess:
    folder = tmp_path / name
    folder.mkdir()
    return await start_serve(
        folder,
        None,
        "--workers",
        "1",
        xiaozhi=f"activation: {{enabled: true, device_keys: {{{SERIAL}: {KEY.hex()}}}}}",
        server=f"instance: {name}",
        extra=f"""
state: {{backend: redis, url: "{redis.url}", prefix: "fleet:", fleet_secret: "{FLEET_SECRET}"}}
""",
    )


def signed(challenge: str) -> str:
    """main/ota.cc: HMAC-SHA256 of the challenge with the eFuse key, "%02x" per byte."""
    digest = hmac.new(KEY, challenge.encode(), hashlib.sha256).hexdigest()
    return json.dumps(
        {"algorithm": "hmac-sha256", "serial_number": SERIAL, "challenge": challenge, "hmac": digest},
        separators=(",", ":"),
    )


async def test_a_proof_of_a_challenge_issued_by_another_instance(tmp_path: Path, redis: RedisServer) -> None:
    async with AsyncExitStack() as stack:
        a, b = await asyncio.gather(start_instance(tmp_path, "a", redis), start_instance(tmp_path, "b", redis))
        stack.push_async_callback(a.stop)
        stack.push_async_callback(b.stop)
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        store = RedisStore(redis.url, prefix="fleet:")
        await store.open()
        stack.push_async_callback(store.close)
        async with aiohttp.ClientSession() as http:
            async with http.post(a.base_url + "/xiaozhi/ota/", headers=HEADERS, json={"mac_address": DEVICE}) as answer:
                challenge = (await answer.json())["activation"]["challenge"]
            other = {**HEADERS, "Device-Id": "aa:bb:cc:dd:ee:43"}
            async with http.post(b.base_url + "/xiaozhi/ota/activate", headers=other, data=signed(challenge)) as answer:
                assert answer.status == 403 and "not issued to this device" in (await answer.json())["error"]
            async with http.post(
                b.base_url + "/xiaozhi/ota/activate", headers=HEADERS, data=signed(challenge)
            ) as answer:
                assert answer.status == 200, await answer.text()
            assert (await store.admission(DEVICE)) is not None
            assert await store.revoke(DEVICE)
            async with http.post(
                b.base_url + "/xiaozhi/ota/activate", headers=HEADERS, data=signed(challenge)
            ) as answer:
                assert answer.status == 403 and "already used" in (await answer.json())["error"]
        assert await store.admission(DEVICE) is None
