"""MQTT + UDP end to end in one process: the simulated device (paho-mqtt, AES-CTR, the firmware's
sequence rules) boots through OTA, connects to the embedded broker, opens an audio session with
`hello`, streams microphone audio over UDP, gets a spoken reply over UDP, and stays reachable
while idle for a push. What a hostile peer sends (another device's topic, forged credentials,
replayed, reordered, foreign and garbage datagrams) is refused and counted."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.metrics.instruments import MQTT_REFUSED, UDP_DROPPED
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.audio import encode_uplink
from vixio.testing.device.mqtt_protocol import DeviceMqttProtocol
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.speech_servers import SlowSpeechServer
from vixio.transports.xiaozhi.mqtt import packets as mp
from vixio.transports.xiaozhi.mqtt.front import HELLO_INTERVAL
from vixio.transports.xiaozhi.protocol.codec import OpusDecoder

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:00:47:01"
OTHER = "aa:bb:cc:00:47:02"


@pytest.fixture
async def tts() -> AsyncIterator[SlowSpeechServer]:
    async with SlowSpeechServer() as server:
        yield server


@pytest.fixture
async def server(llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path) -> AsyncIterator[VixioServer]:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "mqtt": {"enabled": True, "host": "127.0.0.1", "port": 0, "udp_port": 0},
            "agent": {"provider": "litellm", "model": "openai/house-model", "api_base": llm.base_url, "api_key": "t"},
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


def ota_url(server: VixioServer) -> str:
    return f"http://127.0.0.1:{server.ota.port}/xiaozhi/ota/"


def mqtt_layer(device: SimulatedDevice) -> DeviceMqttProtocol:
    assert isinstance(device.protocol, DeviceMqttProtocol)
    return device.protocol


def counted(metric: Any, reason: str) -> float:
    return metric.labels(reason)._value.get()


async def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_ota_mqtt_hello_udp_audio_reply_goodbye_and_an_idle_push(
    server: VixioServer, llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Hello from the broker side."))
    async with SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True, mcp=False) as device:
        reply = await device.run_ota()
        section = reply["mqtt"]
        assert section["username"] == "aabbcc004701" and section["keepalive"] == 240
        assert section["publish_topic"] == "vixio/aabbcc004701/up" and section["endpoint"].startswith("127.0.0.1:")
        assert "websocket" in reply  # kept by the device for when MQTT is turned off
        hello = await device.connect()
        assert hello["transport"] == "udp" and len(bytes.fromhex(hello["udp"]["nonce"])) == 16
        assert bytes.fromhex(hello["udp"]["nonce"])[0] == 0x01  # the firmware drops any other type byte
        # Microphone audio over UDP reaches the session's decoder.
        await until(lambda: server.transport.connections)
        connection = next(iter(server.transport.connections.values()))
        await device.start_listening("manual")
        await until(lambda: connection.listening)  # overtaking `listen start`: the test below
        await device.stream_audio(b"\x00\x10" * 16000, realtime=False)  # 1 s of audio
        await until(lambda: connection.audio_frames_in >= 10)
        await device.stop_listening()
        # A typed turn: the reply's subtitles over MQTT, its Opus over AES-CTR UDP.
        mark = device.mark()
        await device.send_text("hi there")
        await device.wait_for("tts", state="stop", after=mark, timeout=15)
        assert device.sentences[-1] == "Hello from the broker side."
        # The console sees the MQTT session as any other (a caller on this machine needs no token).
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{server.ota.port}/api/sessions") as response,
        ):
            listed = (await response.json())["sessions"]
        assert [s["device_id"] for s in listed] == [DEVICE]
        frames = [f for f in device.audio_frames if f.played]
        assert len(frames) >= 3 and device.faults == []
        assert mqtt_layer(device).drops == {}
        decoder = OpusDecoder(24000)
        assert sum(len(decoder.decode(f.payload)) for f in frames) > 0  # real Opus under the encryption
        # The device closes its audio channel with `goodbye`: the session ends, MQTT stays.
        await device.close()
        await until(lambda: not server.transport.connections)
        assert server.mqtt.front is not None and server.mqtt.front.reachable(DEVICE)
        # Idle and reachable: a push arrives on its connection.
        mark = device.mark()
        assert await server.push_to_idle_device(
            DEVICE, {"type": "alert", "status": "Info", "message": "dinner", "emotion": "happy"}
        )
        await device.wait_for("alert", after=mark, timeout=5)
        assert device.alerts[-1]["message"] == "dinner"
        assert not await server.push_to_idle_device(OTHER, {"type": "alert"})  # never connected


async def test_a_server_goodbye_ends_the_devices_channel_and_a_new_hello_opens_a_new_session(
    server: VixioServer,
) -> None:
    async with SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True, mcp=False) as device:
        first = await device.connect()
        await until(lambda: len(server.transport.connections) == 1)
        session_id = next(iter(server.transport.connections))
        assert first["session_id"] == session_id
        assert await server.transport.close_session(session_id, "test")
        await until(lambda: not device.connected)  # goodbye with its session id: the UDP channel closed
        # A hello sooner than HELLO_INTERVAL after the last is dropped and counted (a flood builds no pipelines).
        before = counted(MQTT_REFUSED, "hello_flood")
        await mqtt_layer(device).send_json({"type": "hello", "version": 3, "transport": "udp"})
        await until(lambda: counted(MQTT_REFUSED, "hello_flood") == before + 1)
        await asyncio.sleep(HELLO_INTERVAL)
        second = await device.connect()
        assert second["session_id"] != session_id and second["udp"]["key"] != first["udp"]["key"]
        await until(lambda: list(server.transport.connections) == [second["session_id"]])


async def test_a_device_publishing_to_another_devices_topic_is_cut_off_and_counted(server: VixioServer) -> None:
    before = counted(MQTT_REFUSED, "topic")
    async with (
        SimulatedDevice(ota_url=ota_url(server), device_id=OTHER, mqtt=True, mcp=False) as other,
        SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True, mcp=False) as device,
    ):
        await other.run_ota()
        await mqtt_layer(other).start()
        await device.connect()
        await until(lambda: server.transport.connections)  # the hello is answered before the session is listed
        hello = json.dumps({"type": "hello", "version": 3, "transport": "udp"})
        await mqtt_layer(other).publish_raw(mqtt_layer(device).settings["publish_topic"], hello)
        await until(lambda: counted(MQTT_REFUSED, "topic") == before + 1)
        assert server.mqtt.front is not None
        await until(lambda: not server.mqtt.front.reachable(OTHER))
        assert len(server.transport.connections) == 1  # the victim's session only


async def test_forged_credentials_are_refused(server: VixioServer) -> None:
    assert server.mqtt.front is not None
    before = counted(MQTT_REFUSED, "credentials")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.mqtt.front.broker_port)
    body = (
        mp._pack_string("MQTT")
        + bytes([4, 0xC2, 0, 60])
        + mp._pack_string(f"{DEVICE}|some-board")
        + mp._pack_string("aabbcc004701")
        + mp._pack_string("guessed-password")
    )
    writer.write(mp.encode(mp.CONNECT, 0, body))
    assert await reader.readexactly(4) == mp.connack(mp.BAD_CREDENTIALS)
    assert await reader.read() == b""
    writer.close()
    assert counted(MQTT_REFUSED, "credentials") == before + 1


async def test_replayed_reordered_foreign_and_garbage_datagrams_are_dropped_and_counted(server: VixioServer) -> None:
    async with SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True, mcp=False) as device:
        await device.connect()
        await device.start_listening("manual")
        layer = mqtt_layer(device)
        await until(lambda: server.transport.connections)
        connection = next(iter(server.transport.connections.values()))
        await until(lambda: connection.listening)
        audio = server.mqtt.front.audio if server.mqtt.front else None
        assert audio is not None
        silence = bytes.fromhex("f8fffe")  # a 20 ms Opus silence frame
        first = layer.seal(silence)
        layer.send_datagram(first)
        await until(lambda: connection.audio_frames_in >= 1 or audio.dropped.get("replay", 0) > 0)
        base = dict(audio.dropped)
        layer.send_datagram(first)  # a replay
        layer.send_datagram(layer.seal(silence, sequence=layer.local_sequence + 5))
        layer.send_datagram(layer.seal(silence, sequence=layer.local_sequence + 2))  # older than the one before
        layer.send_datagram(b"\x01" + b"\x00" * 5)  # short
        layer.send_datagram(b"\x02" + first[1:])  # wrong type byte
        layer.send_datagram(first[:-1])  # length mismatch
        forged = bytearray(first)
        forged[4:8] = b"\xde\xad\xbe\xef"  # an ssrc no session has
        layer.send_datagram(bytes(forged))
        # The right ssrc from another sender (a sniffer on the LAN): its address is not the device's.
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.bind(("127.0.0.1", 0))
        stranger.sendto(layer.seal(silence, sequence=10**6), ("127.0.0.1", audio.port))
        stranger.close()
        want = {"replay": 2, "short": 1, "type": 1, "length": 1, "unknown": 1, "address": 1}
        await until(lambda: all(audio.dropped.get(k, 0) - base.get(k, 0) >= n for k, n in want.items()))
        assert {k: audio.dropped.get(k, 0) - base.get(k, 0) for k in want} == want
        assert counted(UDP_DROPPED, "replay") >= 2
        # The session is unharmed: the next packet in sequence is taken.
        frames = connection.audio_frames_in
        layer.send_datagram(layer.seal(silence, sequence=10**6 + 1))
        await until(
            lambda: connection.audio_frames_in > frames or audio.dropped.get("replay", 0) > base.get("replay", 0) + 2
        )
        assert audio.dropped.get("replay", 0) - base.get("replay", 0) == 2


async def test_vixio_device_mqtt_runs_one_exchange(
    server: VixioServer, llm: ScriptedLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from vixio.testing.device.cli import add_device_parser

    llm.expect(Reply.text("Hi from the command line."))
    parser = argparse.ArgumentParser(prog="vixio")
    add_device_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "device",
            "--ota",
            ota_url(server),
            "--mqtt",
            "--text",
            "hello",
            "--timeout",
            "15",
            "--device-id",
            "aa:bb:cc:00:47:31",
        ]
    )
    assert await asyncio.to_thread(args.func, args) == 0  # it runs its own event loop, as the CLI does
    out = capsys.readouterr().out
    assert '"transport":"udp"' in out and '"text":"Hi from the command line."' in out


async def test_the_console_executes_a_device_tool_and_types_into_an_mqtt_session(
    server: VixioServer, llm: ScriptedLLMServer
) -> None:
    llm.expect(Reply.text("Enjoy your dinner."))
    base = f"http://127.0.0.1:{server.ota.port}"
    async with (
        SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True) as device,
        aiohttp.ClientSession() as http,
    ):
        await device.connect()
        await device.start_listening("manual")
        await device.stream_audio(bytes(9600), realtime=False)  # the UDP address, as a button press gives it
        await until(lambda: server.transport.connections)
        session_id = next(iter(server.transport.connections))
        execute = {"session": session_id, "tool": "self_audio_speaker_set_volume", "arguments": {"volume": "30"}}
        for _ in range(50):  # the device's tools are listed over MQTT after its hello
            async with http.post(base + "/api/execute", json=execute) as response:
                answer = await response.json()
            if answer.get("success"):
                break
            await asyncio.sleep(0.1)
        assert answer["success"] and device.status.volume == 30, answer
        mark = device.mark()
        async with http.post(base + "/api/say", json={"session": session_id, "text": "Dinner is ready."}) as response:
            assert response.status == 200, await response.text()  # typed in, as the device's `listen detect`
        await device.wait_for("tts", state="stop", after=mark, timeout=15)
        assert device.sentences[-1] == "Enjoy your dinner." and device.faults == []


async def test_a_reminder_and_an_operator_message_reach_an_idle_mqtt_device_as_alert_then_notify(
    server: VixioServer,
) -> None:
    """The reminder chain's idle branch over the real broker: the device, idle on MQTT after its
    goodbye, gets an `alert` (what every 2.x firmware shows) and a `notify` whose file it can fetch."""
    from vixio.state.reminders import Reminder

    async with SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True, mcp=False) as device:
        await device.run_ota()
        await device.connect()
        await until(lambda: server.transport.connections)
        await device.close()
        await until(lambda: not server.transport.connections)
        mark = device.mark()
        await server.store.put_reminder(
            Reminder.once(DEVICE, "take the bread out", time.time() + 0.3, zone="UTC"), per_device=20
        )
        server.reminders.changed()
        alert = await device.wait_for("alert", after=mark, timeout=20)
        notify = await device.wait_for("notify", after=mark, timeout=20)
        assert alert["status"] == "Reminder" and "take the bread out" in alert["message"]
        assert [s["start_ms"] for s in notify["subtitles"]][0] == 0
        async with aiohttp.ClientSession() as http, http.get(notify["audio_url"]) as response:
            assert response.status == 200 and (await response.read())[:4] == b"OggS"
        assert await server.store.take_fired(DEVICE) == []  # delivered, not kept for the next session
        # An operator's message to the idle device takes the same way.
        mark = device.mark()
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{server.ota.port}/api/say", json={"device": DEVICE, "text": "dinner is ready"}
            ) as r,
        ):
            assert r.status == 200, await r.text()
        alert = await device.wait_for("alert", after=mark, timeout=20)
        assert "dinner is ready" in alert["message"]
        await device.wait_for("notify", after=mark, timeout=20)


async def test_audio_that_overtakes_its_listen_start_is_heard_and_older_or_wake_word_audio_is_not(
    server: VixioServer,
) -> None:
    """UDP audio goes straight to vixio, `listen start` through the broker: the turn's first
    packets can arrive first. Those within half a second before it are the turn's; older ones,
    and the wake word's (discarded by `listen detect`), are not."""
    async with SimulatedDevice(ota_url=ota_url(server), device_id=DEVICE, mqtt=True, mcp=False) as device:
        await device.connect()
        await until(lambda: server.transport.connections)
        connection = next(iter(server.transport.connections.values()))
        layer = mqtt_layer(device)
        assert server.mqtt.front is not None and server.mqtt.front.audio is not None
        channel = next(iter(server.mqtt.front.audio.sessions.values()))
        packets = encode_uplink(b"\x00\x10" * 16000, 60)  # 1 s of audio: 17 packets

        async def send(count: int) -> None:
            for packet in packets[:count]:
                await layer.send_audio(packet)
            await until(lambda: channel.cipher.received == layer.local_sequence)  # all arrived, none heard

        # Overtaken: 4 packets, then `listen start`; the turn hears them first.
        await send(4)
        assert connection.audio_frames_in == 0
        await layer.send_json(layer.message("listen", state="start", mode="manual"))
        await until(lambda: connection.audio_frames_in == 4)
        await layer.send_json(layer.message("listen", state="stop"))
        await until(lambda: connection.listening is False)
        # Discarded by `listen stop`; then too old; then the wake word's, discarded by `listen detect`.
        for before_start in ("stop", "sleep", "detect"):
            await send(3)
            if before_start == "stop":
                await layer.send_json(layer.message("listen", state="stop"))
            elif before_start == "sleep":
                await asyncio.sleep(0.7)
            else:
                await layer.send_json(layer.message("listen", state="detect", text="你好小智"))
            await layer.send_json(layer.message("listen", state="start", mode="manual"))
            await layer.send_json(layer.message("listen", state="stop"))
            await until(lambda: connection.listening is False and channel._reads.empty())
            await asyncio.sleep(0.1)
            assert connection.audio_frames_in == 4, before_start
