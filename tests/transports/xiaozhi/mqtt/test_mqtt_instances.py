"""Two `vixio serve` instances on one mosquitto (with vixio's plugin) and one redis-server: both
receive every device's messages, and the one that claims the device at its hello serves it
(vixio/transports/xiaozhi/mqtt/ownership.py). A device talks once and gets one server hello and
one reply, not two; an operator's message (`/api/say`, a reminder of kind "message") to the idle
device reaches it once. Real processes, real broker, real UDP, the scripted model on loopback."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

from tests.fleet.test_fleet import start_instance
from vixio.testing.device import ReceivedMessage, SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.redis_server import RedisServer
from vixio.testing.serve import ServeProcess

from .conftest import NEEDS_MOSQUITTO, SECRET, SERVER_PASSWORD, free_port

pytestmark = [pytest.mark.process, NEEDS_MOSQUITTO]

DEVICE = "aa:bb:cc:00:47:20"


def received(device: SimulatedDevice, kind: str, after: int) -> list[ReceivedMessage]:
    return [m for m in device.received[after:] if isinstance(m, ReceivedMessage) and m.type == kind]


async def test_a_device_on_a_broker_two_instances_share_is_served_once(
    tmp_path: Path, redis: RedisServer, llm: ScriptedLLMServer, mosquitto: int
) -> None:
    instances: list[ServeProcess] = []
    try:
        for name in ("east", "west"):
            udp = free_port(socket.SOCK_DGRAM)
            mqtt = (
                f"mqtt: {{enabled: true, host: 127.0.0.1, udp_port: {udp}, public_host: 127.0.0.1, secret: {SECRET}, "
                f'broker_url: "mqtt://vixio:{SERVER_PASSWORD}@127.0.0.1:{mosquitto}"}}\n'
                "reminders: {check_seconds: 1}\n"
            )
            instances.append(await start_instance(tmp_path, name, redis, llm, extra=mqtt))
        await asyncio.gather(*(instance.wait_ready() for instance in instances))
        east, west = instances
        llm.expect(Reply.text("Served once."))
        async with SimulatedDevice(ota_url=east.ota_url, device_id=DEVICE, mqtt=True, mcp=False) as device:
            await device.run_ota()
            await device.connect()
            await device.start_listening("manual")  # the first uplink packet tells the server its address
            await device.stream_audio(bytes(2 * 16000 // 2), realtime=False)
            await device.stop_listening()
            mark = device.mark()
            await device.send_text("hello over a shared broker")
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            await asyncio.sleep(3.0)  # a second instance's hello or reply would have come by now
            assert len(received(device, "hello", 0)) == 1
            assert device.sentences == ["Served once."] and len(llm.requests) == 1
            await device.close()  # goodbye: idle, still on the broker
            mark = device.mark()
            async with (
                aiohttp.ClientSession() as http,
                http.post(west.base_url + "/api/say", json={"device": DEVICE, "text": "dinner is ready"}) as response,
            ):
                assert response.status == 200, await response.text()
            alert = await device.wait_for("alert", after=mark, timeout=30)
            assert "dinner is ready" in alert["message"]
            await asyncio.sleep(4.0)  # both schedulers looked again
            assert len(received(device, "alert", mark)) == 1 and len(received(device, "notify", mark)) <= 1
            assert device.faults == []
        llm.assert_all_consumed()
    finally:
        for instance in instances:
            instance.kill_group()
            await instance.process.wait()
    for instance in instances:
        assert "Traceback" not in instance.text()
