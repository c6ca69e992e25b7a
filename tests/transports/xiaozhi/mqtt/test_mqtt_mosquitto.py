"""MQTT + UDP through Debian's mosquitto 2.0 with vixio's plugin (deploy/mosquitto/vixio_devices.c,
compiled here): the simulated device connects to mosquitto with the credentials vixio's OTA
issued, the plugin delivers vixio's messages to it though it never subscribes, its audio goes to
vixio's UDP port; a device publishing to another device's topic is refused by the plugin's ACL,
and credentials vixio did not issue are refused by mosquitto."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.errors import DeviceError
from vixio.testing.device.mqtt_protocol import DeviceMqttProtocol
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.speech_servers import SlowSpeechServer

from .conftest import NEEDS_MOSQUITTO, SECRET, SERVER_PASSWORD

pytestmark = [pytest.mark.process, NEEDS_MOSQUITTO]


@pytest.fixture
async def server(mosquitto: int, llm: ScriptedLLMServer, tmp_path: Path) -> AsyncIterator[VixioServer]:
    async with SlowSpeechServer() as tts:
        config = VixioConfig.model_validate(
            {
                "xiaozhi": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "http": {"host": "127.0.0.1", "port": 0},
                    "idle_timeout": 0,
                },
                "mqtt": {
                    "enabled": True,
                    "host": "127.0.0.1",
                    "udp_port": 0,
                    "public_host": "127.0.0.1",
                    "broker_url": f"mqtt://vixio:{SERVER_PASSWORD}@127.0.0.1:{mosquitto}",
                    "secret": SECRET,
                },
                "agent": {"provider": "litellm", "model": "openai/m", "api_base": llm.base_url, "api_key": "t"},
                "tts": {"provider": "openai", "api_base": tts.base_url, "voice": "alloy", "fallback": None},
                "state": {"path": str(tmp_path / "data" / "state.db")},
            }
        )
        vixio = VixioServer(config)
        await vixio.start()
        try:
            yield vixio
        finally:
            await vixio.stop()


async def until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_device_through_mosquitto(server: VixioServer, llm: ScriptedLLMServer, mosquitto: int) -> None:
    llm.expect(Reply.text("Hello through mosquitto."))
    ota = f"http://127.0.0.1:{server.ota.port}/xiaozhi/ota/"
    front = server.mqtt.front
    assert front is not None
    async with (
        SimulatedDevice(ota_url=ota, device_id="aa:bb:cc:00:47:21", mqtt=True, mcp=False) as device,
        SimulatedDevice(ota_url=ota, device_id="aa:bb:cc:00:47:22", mqtt=True, mcp=False) as intruder,
    ):
        reply = await device.run_ota()
        assert reply["mqtt"]["endpoint"] == f"127.0.0.1:{mosquitto}"
        await device.connect()  # hello over mosquitto; the server hello came back through the plugin
        await until(lambda: server.transport.connections)
        connection = next(iter(server.transport.connections.values()))
        await device.start_listening("manual")
        # Audio overtaking `listen start` is held only 0.5 s (test_mqtt_session's own test): on a
        # loaded host the broker's hop can take longer, and this test is about the path.
        await until(lambda: connection.listening)
        await device.stream_audio(bytes(16000), realtime=False)
        await until(lambda: connection.audio_frames_in >= 5)
        await device.stop_listening()
        mark = device.mark()
        await device.send_text("hi")
        await device.wait_for("tts", state="stop", after=mark, timeout=15)
        assert device.sentences[-1] == "Hello through mosquitto." and sum(f.played for f in device.audio_frames) >= 3
        # Another device's topic: mosquitto's ACL (the plugin) drops it; vixio never sees it.
        await intruder.run_ota()
        layer = intruder.protocol
        assert isinstance(layer, DeviceMqttProtocol)
        await layer.start()
        await until(lambda: front.reachable("aa:bb:cc:00:47:22"))
        target = device.protocol.settings["publish_topic"]  # type: ignore[union-attr]
        await layer.publish_raw(target, json.dumps({"session_id": device.session_id, "type": "goodbye"}))
        await asyncio.sleep(0.5)
        assert device.connected and len(server.transport.connections) == 1  # the forged goodbye went nowhere
        log = next(Path(server.config.state.path).parents[1].glob("mosquitto.log")).read_text()
        assert "vixio_devices: device aabbcc004722 published to vixio/aabbcc004721/up, not its own topic" in log
        # Idle: the push reaches the device through the plugin.
        await device.close()
        await until(lambda: not server.transport.connections)
        mark = device.mark()
        assert await server.push_to_idle_device(
            "aa:bb:cc:00:47:21", {"type": "alert", "status": "Info", "message": "dinner", "emotion": "happy"}
        )
        await device.wait_for("alert", after=mark, timeout=5)
    await until(lambda: not front.reachable("aa:bb:cc:00:47:21"))  # the plugin said it left
    # Credentials vixio did not issue: mosquitto refuses the connection.
    forged = SimulatedDevice(ota_url=ota, device_id="aa:bb:cc:00:47:23", mqtt=True, mcp=False)
    await forged.run_ota()
    assert isinstance(forged.protocol, DeviceMqttProtocol)
    forged.protocol.settings = {**forged.protocol.settings, "password": "x" * 32}
    with pytest.raises(DeviceError, match="MQTT connect"):
        await forged.protocol.start()
