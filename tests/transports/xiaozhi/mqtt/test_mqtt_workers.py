"""`vixio serve --workers 2` with `mqtt.enabled`, on the embedded broker and on mosquitto with
vixio's plugin: the supervisor's OTA hands out MQTT credentials, worker w0 (its embedded broker
and its UDP socket), or on mosquitto the worker that claimed the device, serves its session (OTA -> MQTT ->
hello -> UDP audio -> spoken reply), a WebSocket device is served beside it, and a push posted to
the supervisor reaches the idle MQTT device through the worker that holds it."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve, until

from .conftest import NEEDS_MOSQUITTO, SECRET, SERVER_PASSWORD, free_port

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(sys.platform != "linux", reason="several workers run on Linux only"),
]


async def test_on_the_embedded_broker(llm: ScriptedLLMServer, tmp_path: Path) -> None:
    port = free_port(socket.SOCK_STREAM)
    await two_workers(llm, tmp_path, port, f"port: {port}")


@NEEDS_MOSQUITTO
async def test_on_mosquitto(llm: ScriptedLLMServer, tmp_path: Path, mosquitto: int) -> None:
    await two_workers(
        llm,
        tmp_path,
        mosquitto,
        f"broker_url: 'mqtt://vixio:{SERVER_PASSWORD}@127.0.0.1:{mosquitto}', secret: {SECRET}, public_host: 127.0.0.1",
    )


async def two_workers(llm: ScriptedLLMServer, tmp_path: Path, port: int, settings: str) -> None:
    """An MQTT device and a WebSocket device on two workers, and a push through the supervisor."""
    llm.expect(Reply.text("Over UDP."), Reply.text("Over the socket."))
    udp = free_port(socket.SOCK_DGRAM)
    extra = f"""
mqtt: {{enabled: true, host: 127.0.0.1, udp_port: {udp}, {settings}}}
state: {{path: {tmp_path / "state.db"}}}
"""
    serve = await start_serve(tmp_path, llm, "--workers", "2", extra=extra)
    try:
        await serve.wait_ready()
        async with SimulatedDevice(ota_url=serve.ota_url, device_id="aa:bb:cc:00:47:10", mqtt=True, mcp=False) as mqtt:
            reply = await mqtt.run_ota()
            assert reply["mqtt"]["endpoint"] == f"127.0.0.1:{port}"
            hello = await mqtt.connect()
            # On mosquitto every worker is a client with a UDP socket of its own; the one that claimed
            # the device answers (worker N listens on udp_port + N).
            assert hello["udp"]["port"] == udp or ("broker_url" in settings and hello["udp"]["port"] == udp + 1)
            # The server learns the device's UDP address from its first uplink packet, as behind a NAT:
            # a real device streams its microphone from `listen start` on.
            await mqtt.start_listening("manual")
            await mqtt.stream_audio(bytes(2 * 16000 // 2), realtime=False)
            await mqtt.stop_listening()
            mark = mqtt.mark()
            await mqtt.send_text("hello over mqtt")
            await mqtt.wait_for("tts", state="stop", after=mark, timeout=30)
            assert mqtt.sentences[-1] == "Over UDP." and sum(f.played for f in mqtt.audio_frames) >= 3
            async with SimulatedDevice(ws_url=serve.ws_url, device_id="aa:bb:cc:00:47:11", mcp=False) as ws:
                await ws.connect()
                mark = ws.mark()
                await ws.send_text("hello over the socket")
                await ws.wait_for("tts", state="stop", after=mark, timeout=30)
                assert ws.sentences[-1] == "Over the socket."
            await mqtt.close()  # goodbye: idle, still on the broker
            mark = mqtt.mark()
            push = {
                "device_id": "aa:bb:cc:00:47:10",
                "message": {"type": "alert", "status": "Info", "message": "dinner is ready", "emotion": "happy"},
            }
            async with aiohttp.ClientSession() as http:
                async with http.post(serve.base_url + "/api/mqtt/push", json=push) as response:
                    assert response.status == 200, await response.text()
                push["device_id"] = "aa:bb:cc:00:47:11"  # WebSocket-only: not MQTT-reachable
                async with http.post(serve.base_url + "/api/mqtt/push", json=push) as response:
                    assert response.status == 404
            await mqtt.wait_for("alert", after=mark, timeout=10)
            assert mqtt.alerts[-1]["message"] == "dinner is ready" and mqtt.faults == []

            async def session_closed() -> bool:
                sessions = (await serve.metrics()).get("sessions")
                return sessions == 0

            await until(session_closed, 10, "the MQTT session to end after goodbye")
    finally:
        await serve.stop()
