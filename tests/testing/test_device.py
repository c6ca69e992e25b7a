"""The simulated device against a hand-driven loopback server: OTA, handshake, states, audio."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
import wave
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from tests.testing.conftest import SERVER_HELLO, SESSION, DeviceConnection, LoopbackServer, StartHttp, downlink_packets
from vixio.testing.device import DeviceDisconnected, DeviceError, HelloError, OtaError, SimulatedDevice
from vixio.testing.device.audio import tone
from vixio.transports.xiaozhi.protocol.codec import OpusDecoder
from vixio.transports.xiaozhi.protocol.framing import unpack

pytestmark = pytest.mark.integration

MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")
DEVICE_HELLO = {
    "type": "hello",
    "version": 1,
    "features": {"mcp": True, "glyph_push": False},
    "transport": "websocket",
    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
}

Connect = Callable[..., Awaitable[tuple[SimulatedDevice, DeviceConnection]]]


@pytest.fixture
async def connect(server: LoopbackServer) -> AsyncIterator[Connect]:
    """Connect a SimulatedDevice to the loopback server and complete the hello exchange."""
    devices: list[SimulatedDevice] = []

    async def make(**kwargs: Any) -> tuple[SimulatedDevice, DeviceConnection]:
        device = SimulatedDevice(ws_url=server.ws_url, **kwargs)
        devices.append(device)
        connecting = asyncio.create_task(device.connect())
        connection = await server.accept()
        await connection.handshake()
        assert await connecting == SERVER_HELLO
        return device, connection

    yield make
    for device in devices:
        await device.close()


def ota_reply(ws_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "server_time": {"timestamp": 1754611200000, "timezone_offset": 480},
        "firmware": {"version": "2.4.2", "url": ""},
        "websocket": {"url": ws_url, "token": ""},
        **extra,
    }


# ---------------------------------------------------------------- OTA and handshake


async def test_ota_then_handshake_carry_the_firmware_headers_body_and_hello(
    server: LoopbackServer, start_http: StartHttp
) -> None:
    seen: list[tuple[str, CIMultiDict[str], Any]] = []

    async def ota(request: web.Request) -> web.Response:
        seen.append((request.path, CIMultiDict(request.headers), await request.json()))
        return web.json_response(ota_reply(server.ws_url, websocket={"url": server.ws_url, "token": "tok123"}))

    app = web.Application()
    app.router.add_post("/xiaozhi/ota/", ota)
    base = await start_http(app)
    device = SimulatedDevice(ota_url=f"{base}/xiaozhi/ota/")
    connecting = asyncio.create_task(device.connect())
    connection = await server.accept()
    hello = await connection.handshake()
    assert await connecting == SERVER_HELLO
    try:
        [(path, headers, body)] = seen
        assert path == "/xiaozhi/ota/"
        assert MAC.fullmatch(headers["Device-Id"]) and headers["Device-Id"] == device.device_id
        assert uuid.UUID(headers["Client-Id"]).version == 4 and headers["Client-Id"] == device.client_id
        assert headers["Activation-Version"] == "1"
        assert headers["User-Agent"] == "bread-compact-wifi/2.4.2"
        assert headers["Accept-Language"] == "zh-CN"
        assert headers["Content-Type"] == "application/json"
        assert body["mac_address"] == device.device_id and body["uuid"] == device.client_id
        assert body["application"]["version"] == "2.4.2" and body["board"]["type"] == "bread-compact-wifi"
        assert isinstance(body["minimum_free_heap_size"], str)  # the firmware's quirk

        assert connection.path == "/xiaozhi/v1/"
        assert connection.headers["Authorization"] == "Bearer tok123"
        assert connection.headers["Protocol-Version"] == "1"
        assert connection.headers["Device-Id"] == device.device_id
        assert connection.headers["Client-Id"] == device.client_id
        assert hello == DEVICE_HELLO and list(hello) == list(DEVICE_HELLO)
        assert device.state == "idle" and device.session_id == SESSION

        await device.send_text("what time is it")
        detect = await connection.next_json("listen")
        assert detect == {"session_id": SESSION, "type": "listen", "state": "detect", "text": "what time is it"}
        assert next(iter(detect)) == "session_id"
    finally:
        await device.close()


async def test_ota_version_3_empty_token_and_aec_shape_the_channel(
    server: LoopbackServer, start_http: StartHttp
) -> None:
    async def ota(request: web.Request) -> web.Response:
        return web.json_response(ota_reply(server.ws_url, websocket={"url": server.ws_url, "token": "", "version": 3}))

    app = web.Application()
    app.router.add_post("/ota", ota)
    device = SimulatedDevice(ota_url=f"{await start_http(app)}/ota", aec=True, listening_mode="realtime")
    connecting = asyncio.create_task(device.connect())
    connection = await server.accept()
    hello = await connection.handshake()
    await connecting
    try:
        assert "Authorization" not in connection.headers
        assert connection.headers["Protocol-Version"] == "3"
        assert hello["version"] == 3 and hello["features"] == {"aec": True, "mcp": True, "glyph_push": False}

        await device.start_listening()
        assert (await connection.next_json("listen"))["mode"] == "realtime"
        assert await device.stream_audio(tone(0.3), realtime=False) == 5
        await asyncio.sleep(0.1)
        decoder = OpusDecoder(16000)
        frames = [unpack(data, 3) for data in connection.binaries]
        assert [len(decoder.decode(frame.payload)) for frame in frames] == [960 * 2] * 5
        assert all(data[:2] == b"\x00\x00" for data in connection.binaries)  # v3: type 0, reserved 0

        await connection.tts("start")
        await connection.send_frames(
            [bytes([0, 0]) + len(p).to_bytes(2, "big") + p for p in downlink_packets(3)], version=1
        )  # hand-built v3 frames
        await connection.tts("stop")
        await device.wait_for("tts", state="stop")
        assert [f.played for f in device.audio_frames] == [True] * 3
    finally:
        await device.close()


@pytest.mark.parametrize(("token", "authorization"), [("abc", "Bearer abc"), ("Token x.y", "Token x.y")])
async def test_token_gets_a_bearer_prefix_unless_it_has_a_space(
    server: LoopbackServer, token: str, authorization: str
) -> None:
    device = SimulatedDevice(ws_url=server.ws_url, token=token, protocol_version=2)
    connecting = asyncio.create_task(device.connect())
    connection = await server.accept()
    await connection.handshake()
    await connecting
    try:
        assert connection.headers["Authorization"] == authorization
        assert connection.headers["Protocol-Version"] == "2"
    finally:
        await device.close()


@pytest.mark.parametrize(
    ("status", "reply", "expected"),
    [
        (200, {"websocket": {"url": "ws://x/", "token": ""}, "mqtt": {"endpoint": "x"}}, "MQTT"),
        (200, {"success": False, "message": "request error."}, "no `websocket`"),
        (500, {"error": "boom"}, "HTTP 500"),
    ],
)
async def test_ota_replies_a_device_cannot_use_fail_loudly(
    start_http: StartHttp, status: int, reply: dict[str, Any], expected: str
) -> None:
    async def ota(request: web.Request) -> web.Response:
        return web.json_response(reply, status=status)

    app = web.Application()
    app.router.add_post("/ota/", ota)
    device = SimulatedDevice(ota_url=f"{await start_http(app)}/ota/")
    with pytest.raises(OtaError, match=expected):
        await device.connect()
    assert device.state == "idle" and not device.connected


async def test_activation_polls_until_200_then_uses_the_websocket(
    server: LoopbackServer, start_http: StartHttp
) -> None:
    activate_calls: list[tuple[str, str]] = []

    async def ota(request: web.Request) -> web.Response:
        if len(activate_calls) >= 3:  # activated: no more activation, and now a token
            return web.json_response({**ota_reply(server.ws_url), "websocket": {"url": server.ws_url, "token": "t-1"}})
        activation = {"code": "123456", "message": "say 123456", "challenge": "abc", "timeout_ms": 30000}
        return web.json_response(ota_reply(server.ws_url, activation=activation))

    async def activate(request: web.Request) -> web.Response:
        activate_calls.append((request.headers["Device-Id"], await request.text()))
        return web.Response(status=200 if len(activate_calls) == 3 else 202)

    app = web.Application()
    app.router.add_post("/xiaozhi/ota/", ota)
    app.router.add_post("/xiaozhi/ota/activate", activate)
    device = SimulatedDevice(ota_url=f"{await start_http(app)}/xiaozhi/ota/", activation_poll_interval=0.01)
    reply = await device.run_ota()
    # Like the firmware, the OTA check runs again after activation; its reply is the one kept.
    assert "activation" not in reply and device.ota is not None and device.ota.token == "t-1"
    assert [body for _, body in activate_calls] == ["{}"] * 3  # no serial number: empty body
    assert {device_id for device_id, _ in activate_calls} == {device.device_id}
    assert device.ota is not None and device.ota.activation_polls == 3 and device.ota.activation_code == "123456"
    assert device.ws_url == server.ws_url


async def test_activation_without_challenge_rechecks_ota(server: LoopbackServer, start_http: StartHttp) -> None:
    checks = 0

    async def ota(request: web.Request) -> web.Response:
        nonlocal checks
        checks += 1
        extra = {"activation": {"code": "654321", "message": "bind me"}} if checks < 3 else {}
        return web.json_response(ota_reply(server.ws_url, **extra))

    app = web.Application()
    app.router.add_post("/ota/", ota)
    device = SimulatedDevice(ota_url=f"{await start_http(app)}/ota/", activation_error_interval=0.01)
    await device.run_ota()
    assert checks == 3 and device.ota is not None and device.ota.activation_polls == 0


async def test_server_hello_without_transport_is_a_crash(server: LoopbackServer) -> None:
    device = SimulatedDevice(ws_url=server.ws_url)
    connecting = asyncio.create_task(device.connect())
    connection = await server.accept()
    await connection.handshake(transport=None)
    with pytest.raises(HelloError, match="transport"):
        await connecting
    assert device.faults and "null pointer" in device.faults[0]
    await asyncio.wait_for(connection.closed.wait(), 2)  # the device dropped the socket
    assert device.state == "idle"


async def test_no_server_hello_times_out_and_drops_the_socket(server: LoopbackServer) -> None:
    device = SimulatedDevice(ws_url=server.ws_url, hello_timeout=0.3)
    connecting = asyncio.create_task(device.connect())
    connection = await server.accept()
    await connection.next_json("hello")
    started = time.monotonic()
    with pytest.raises(HelloError, match="within 0.3 s"):
        await connecting
    assert 0.25 < time.monotonic() - started < 1.0
    await asyncio.wait_for(connection.closed.wait(), 2)


# ---------------------------------------------------------------- downlink audio


async def test_audio_plays_only_while_speaking(connect: Connect) -> None:
    device, connection = await connect()
    packets = downlink_packets(10)
    await connection.send_frames(packets[:3])  # before tts start: dropped
    await connection.send_json({"session_id": SESSION, "type": "stt", "text": "hello"})
    await connection.tts("start")
    await connection.send_json({"session_id": SESSION, "type": "llm", "emotion": "happy", "text": "🙂"})
    await connection.tts("sentence_start", text="Hi there.")
    await connection.send_frames(packets[3:8])
    await connection.tts("stop")
    await connection.send_frames(packets[8:])  # after tts stop: dropped
    await connection.send_json({"session_id": SESSION, "type": "custom", "payload": {"message": "end"}})
    await device.wait_for("custom")

    assert [f.drop_reason for f in device.audio_frames] == ["not_speaking"] * 3 + [None] * 5 + ["not_speaking"] * 2
    assert [f.state for f in device.audio_frames] == ["idle"] * 3 + ["speaking"] * 5 + ["listening"] * 2
    assert device.drop_counts() == {"not_speaking": 5}
    assert len(device.decoded_audio()) == 5 * 1440 * 2  # 24 kHz, 60 ms, int16
    assert device.stt_texts == ["hello"] and device.sentences == ["Hi there."] and device.emotion == "happy"
    assert device.custom_messages == [{"message": "end"}]


async def test_burst_past_40_queued_packets_is_dropped_and_tts_start_clears_the_queue(connect: Connect) -> None:
    device, connection = await connect()
    await connection.tts("start")
    await connection.send_frames(downlink_packets(50))
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")

    accepted = [f for f in device.audio_frames if f.played]
    dropped = [f for f in device.audio_frames if f.drop_reason == "queue_full"]
    # One packet is playing, 40 wait behind it; a slow runner may free a slot or two.
    assert 41 <= len(accepted) <= 43 and len(accepted) + len(dropped) == 50
    assert dropped[0].queue_depth == 40
    assert device.state == "listening"  # auto mode: listening while the queue drains

    await connection.tts("start")  # entering speaking resets the decoder
    await device.wait_for_state("speaking")
    cut = device.drop_counts().get("decoder_reset", 0)
    assert cut >= 35 and cut + len([f for f in device.audio_frames if f.played]) == len(accepted)
    assert [m.data["type"] for m in device.sent] == ["hello"]  # the drain never completed: no listen start


async def test_paced_downlink_is_played_completely(connect: Connect) -> None:
    device, connection = await connect()
    await connection.tts("start")
    await connection.send_frames(downlink_packets(12), prebuffer=5)
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")
    assert device.drop_counts() == {} and sum(f.played for f in device.audio_frames) == 12


async def test_too_long_packet_and_second_hello_follow_the_announced_audio_params(connect: Connect) -> None:
    device, connection = await connect()
    await connection.tts("start")
    await connection.send_frames(downlink_packets(1, frame_ms=120))  # longer than the announced 60 ms
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")
    assert device.drop_counts() == {"too_long": 1}

    await connection.send_json(
        {
            **SERVER_HELLO,
            "session_id": "second",
            "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
        }
    )
    await device.wait_for("hello", after=1)
    assert device.session_id == "second" and device.server_sample_rate == 16000
    mark = device.mark()
    await connection.tts("start")
    await connection.send_frames(downlink_packets(2, sample_rate=16000))
    await connection.tts("stop")
    await device.wait_for("tts", state="stop", after=mark)
    assert [f.sample_rate for f in device.audio_frames if f.played] == [16000, 16000]
    assert len(device.decoded_audio()) == 2 * 960 * 2


# ---------------------------------------------------------------- listening modes


async def test_auto_mode_sends_listen_start_after_tts_stop_once_playback_drained(connect: Connect) -> None:
    device, connection = await connect()
    await device.start_listening()
    assert await connection.next_json("listen") == {
        "session_id": SESSION,
        "type": "listen",
        "state": "start",
        "mode": "auto",
    }
    await connection.tts("start")
    await connection.send_frames(downlink_packets(10))  # 0.6 s of audio queued at once
    await connection.tts("stop")
    stopped = time.monotonic()
    await device.wait_for("tts", state="stop")
    assert device.state == "listening"

    when, listen = await connection.next_json_timed("listen", timeout=3)
    assert listen == {"session_id": SESSION, "type": "listen", "state": "start", "mode": "auto"}
    assert 0.45 <= when - stopped < 1.2, when - stopped  # after the 0.6 s drain, not at tts stop
    await device.wait_until_idle(timeout=2)


async def test_manual_push_to_talk_streams_opus_and_tts_stop_returns_to_idle(connect: Connect) -> None:
    device, connection = await connect(listening_mode="manual")
    started = time.monotonic()
    sent = await device.push_to_talk(tone(0.3))
    assert sent == 5 and time.monotonic() - started >= 0.22  # paced at real time
    assert await connection.next_json("listen") == {
        "session_id": SESSION,
        "type": "listen",
        "state": "start",
        "mode": "manual",
    }
    assert await connection.next_json("listen") == {"session_id": SESSION, "type": "listen", "state": "stop"}
    kinds = [kind for _, kind, _ in connection.events]
    assert kinds == ["text"] + ["text"] + ["binary"] * 5 + ["text"]  # hello, start, audio, stop
    decoder = OpusDecoder(16000)
    assert [len(decoder.decode(p)) for p in connection.binaries] == [960 * 2] * 5
    assert device.state == "idle"

    await connection.tts("start")  # idle -> speaking is legal
    await connection.send_frames(downlink_packets(2))
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")
    assert device.state == "idle"
    await connection.expect_no_json(0.3)  # manual mode does not listen again by itself


async def test_realtime_keeps_the_mic_open_while_speaking_and_listens_once(connect: Connect) -> None:
    device, connection = await connect(listening_mode="realtime", aec=True)
    await device.start_listening()
    assert (await connection.next_json("listen"))["mode"] == "realtime"
    await connection.tts("start")
    await device.wait_for_state("speaking")
    assert await device.stream_audio(tone(0.12), realtime=False) == 2  # barge-in audio while speaking
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")
    assert device.state == "listening"
    await connection.expect_no_json(0.3)  # no second listen start on this channel
    assert len(connection.binaries) == 2


async def test_auto_mode_mic_closes_when_speaking_starts(connect: Connect) -> None:
    device, connection = await connect()
    await device.start_listening()
    streaming = asyncio.create_task(device.stream_audio(tone(1.2)))
    async with asyncio.timeout(2):
        while len(connection.binaries) < 3:
            await asyncio.sleep(0.01)
    await connection.tts("start")
    sent = await streaming
    assert 3 <= sent < 20 and device.uplink_packets == sent
    with pytest.raises(DeviceError, match="mic"):
        await device.stream_audio(tone(0.1))


async def test_abort_keeps_speaking_until_tts_stop(connect: Connect) -> None:
    device, connection = await connect()
    await connection.tts("start")
    await device.wait_for_state("speaking")
    await device.abort()
    assert await connection.next_json("abort") == {"session_id": SESSION, "type": "abort"}
    assert device.state == "speaking"
    await connection.send_frames(downlink_packets(2))  # still accepted after abort
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")
    assert device.state == "listening" and [f.played for f in device.audio_frames] == [True, True]


async def test_wake_word_sends_audio_then_detect_then_listen_start(connect: Connect) -> None:
    device, connection = await connect()
    await device.wake_word(audio=tone(3.0))
    detect = await connection.next_json("listen")
    start = await connection.next_json("listen")
    assert detect == {"session_id": SESSION, "type": "listen", "state": "detect", "text": "你好小智"}
    assert start == {"session_id": SESSION, "type": "listen", "state": "start", "mode": "auto"}
    kinds = [kind for _, kind, _ in connection.events]
    assert kinds == ["text"] + ["binary"] * 34 + ["text", "text"]  # only the last 2 s of wake audio

    await connection.tts("start")
    await device.wait_for_state("speaking")
    await device.wake_word()  # heard again while speaking
    assert await connection.next_json("abort") == {
        "session_id": SESSION,
        "type": "abort",
        "reason": "wake_word_detected",
    }
    assert (await connection.next_json("listen"))["state"] == "start" and device.state == "listening"


# ---------------------------------------------------------------- robustness and recording


async def test_malformed_and_unknown_server_messages_are_ignored(connect: Connect) -> None:
    device, connection = await connect()
    await connection.ws.send("not json")
    await connection.send_json({"session_id": SESSION, "type": "iot", "commands": []})
    await connection.send_json({"session_id": SESSION, "type": "goodbye"})
    await connection.send_json({"session_id": SESSION, "type": "alert", "status": "Warning", "message": "low"})
    await connection.send_json(
        {"session_id": SESSION, "type": "alert", "status": "Warning", "message": "Battery low", "emotion": "sad"}
    )
    await connection.send_json({"type": "system", "command": "shutdown"})
    await device.wait_for("system")
    assert len(device.warnings) == 5 and device.faults == []
    assert device.alerts == [
        {"session_id": SESSION, "type": "alert", "status": "Warning", "message": "Battery low", "emotion": "sad"}
    ]
    assert device.emotion == "sad" and device.connected
    await device.send_text("still alive")
    assert (await connection.next_json("listen"))["text"] == "still alive"


async def test_server_close_returns_to_idle_and_fails_waits(connect: Connect) -> None:
    device, connection = await connect()
    await device.start_listening()
    await connection.ws.close()
    with pytest.raises(DeviceDisconnected):
        await device.wait_for("tts", timeout=5)
    assert device.state == "idle" and device.close_code == 1000


async def test_system_reboot_destroys_the_socket(connect: Connect) -> None:
    device, connection = await connect()
    await connection.send_json({"session_id": SESSION, "type": "system", "command": "reboot"})
    await asyncio.wait_for(connection.closed.wait(), 2)
    assert device.reboot_requested and not device.connected


async def test_save_recording_writes_timed_messages_and_played_audio(connect: Connect, tmp_path: Path) -> None:
    device, connection = await connect()
    await device.send_text("hi")
    await connection.next_json("listen")
    await connection.tts("start")
    await connection.send_frames(downlink_packets(4))
    await connection.tts("stop")
    await device.wait_for("tts", state="stop")
    device.save_recording(tmp_path / "rec")

    document = json.loads((tmp_path / "rec" / "messages.json").read_text(encoding="utf-8"))
    flow = [(m["dir"], m["data"]["type"], m["data"].get("state")) for m in document["messages"]]
    assert flow == [
        ("out", "hello", None),
        ("in", "hello", None),
        ("out", "listen", "detect"),
        ("in", "tts", "start"),
        ("in", "tts", "stop"),
    ]
    times = [m["t"] for m in document["messages"]]
    assert times == sorted(times) and times[0] == 0.0
    assert document["audio"]["played"] == 4 and document["session_id"] == SESSION
    with wave.open(str(tmp_path / "rec" / "received.wav")) as wav:
        assert wav.getframerate() == 24000 and wav.getnframes() == 4 * 1440
