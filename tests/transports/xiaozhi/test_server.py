"""The Xiaozhi server end to end: a real WebSocket server, real Opus, the simulated device."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

import vixio.app.server
from vixio.config.models import VixioConfig
from vixio.core.batching import worker_stats
from vixio.core.transport import ConnectionClosed
from vixio.testing.device import SimulatedDevice
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder
from vixio.transports.xiaozhi.session.auth import issue_token
from vixio.transports.xiaozhi.session.downlink import PACED_FRAMES_PER_WAKEUP

from .conftest import ws_url

pytestmark = pytest.mark.integration


async def test_ota_then_hello_then_typed_text_is_answered_with_paced_audio(make_server) -> None:
    server = await make_server(reply_seconds=1.2)
    async with SimulatedDevice(ota_url=server.ota.url) as device:
        ota = await device.run_ota()
        assert "mqtt" not in ota and ota["websocket"]["url"].startswith("ws://127.0.0.1:")
        started = time.monotonic()
        hello = await device.connect()
        assert time.monotonic() - started < 1.0
        assert hello["transport"] == "websocket" and hello["audio_params"]["sample_rate"] == 24000
        await device.start_listening("auto")
        mark = device.mark()
        await device.send_text("what time is it")
        stt = await device.wait_for("stt", after=mark)
        assert stt["text"] == "what time is it"
        await device.wait_for("tts", state="start", after=mark)
        sentence = await device.wait_for("tts", state="sentence_start", after=mark)
        assert sentence["text"] == "You said: what time is it"
        await device.wait_for("tts", state="stop", after=mark, timeout=5)
        await device.wait_until_idle(timeout=5)

        frames = device.audio_frames
        assert len(frames) == 20  # 1.2 s at 60 ms
        assert all(frame.played for frame in frames), device.drop_counts()
        stop_time = next(
            m.time
            for m in device.received[mark:]
            if m.data == {"type": "tts", "state": "stop"}
            or (m.data.get("type") == "tts" and m.data.get("state") == "stop")
        )
        assert stop_time >= frames[-1].time  # the last frame before `tts stop`
        span = frames[-1].time - frames[0].time
        # Paced at real time, not flooded: after the pre-buffer of 5, frames leave in groups when
        # each group's first frame is due, so the last goes PACED_FRAMES_PER_WAKEUP - 1 frames early.
        assert span >= (20 - 5 - (PACED_FRAMES_PER_WAKEUP - 1)) * 0.060 * 0.8
        # In auto mode the device asks to listen again after the reply drained.
        assert [m.data for m in device.sent if m.data.get("type") == "listen"][-1]["state"] == "start"
        assert device.faults == []
        audio = device.decoded_audio()
        assert len(audio) >= int(1.2 * 24000) * 2 * 0.95


async def test_abort_stops_at_once_and_drops_unsent_audio(make_server) -> None:
    server = await make_server(reply_seconds=5.0)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        await device.start_listening("auto")
        mark = device.mark()
        await device.send_text("tell me a long story")
        await device.wait_for("tts", state="sentence_start", after=mark)
        await asyncio.sleep(0.3)
        abort_mark = device.mark()
        sent_at = time.monotonic()
        await device.abort()
        await device.wait_for("tts", state="stop", after=abort_mark, timeout=2)
        assert time.monotonic() - sent_at < 0.1
        await asyncio.sleep(0.3)
        assert len(device.audio_frames) < 5.0 / 0.060 / 2  # most of the 5 s reply never went out
        assert server.transport.connections  # the session lives on
        mark = device.mark()
        await device.send_text("again")
        await device.wait_for("tts", state="sentence_start", after=mark)


async def test_hello_deadline_closes_silent_connections(make_server) -> None:
    server = await make_server(hello_timeout=0.3)
    async with websockets.connect(ws_url(server), additional_headers={"Device-Id": "aa:bb:cc:dd:ee:ff"}) as ws:
        started = time.monotonic()
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 3)
        assert 0.25 < time.monotonic() - started < 2


async def test_any_path_and_query_parameter_ids_for_browsers(make_server) -> None:
    server = await make_server()
    url = ws_url(server, "/some/other/path?device-id=AA:BB:CC:00:11:22&client-id=browser-1")
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "hello", "version": 1, "transport": "websocket", "audio_params": {}}))
        hello = json.loads(await asyncio.wait_for(ws.recv(), 2))
        assert hello["type"] == "hello" and hello["session_id"]
        (connection,) = server.transport.connections.values()
        assert connection.device_id == "aa:bb:cc:00:11:22"


async def test_malformed_and_unknown_messages_are_dropped_and_the_session_goes_on(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        for junk in [
            "{broken json",
            "[1,2,3]",
            json.dumps({"type": "iot", "update": True}),
            json.dumps({"type": "listen", "state": "dance"}),
            json.dumps({"no": "type"}),
        ]:
            await device.send_raw(junk)
        await device.send_raw(b"")  # an empty binary frame (DTX) before listening
        mark = device.mark()
        await device.send_text("still there?")
        assert (await device.wait_for("stt", after=mark))["text"] == "still there?"


async def test_oversized_message_closes_only_that_connection(make_server) -> None:
    server = await make_server(max_message_bytes=4096)
    async with websockets.connect(ws_url(server), additional_headers={"Device-Id": "aa:bb:cc:dd:ee:01"}) as ws:
        await ws.send(json.dumps({"type": "hello", "version": 1}))
        await ws.recv()
        await ws.send(b"x" * 10_000)
        with pytest.raises(websockets.ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 2)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    async with SimulatedDevice(ws_url=ws_url(server)) as device:  # the server is fine
        await device.connect()


@pytest.mark.parametrize("version", [2, 3])
async def test_binary_protocol_versions_frame_the_downlink(make_server, version: int) -> None:
    server = await make_server(reply_seconds=0.3)
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=version) as device:
        await device.connect()
        await device.start_listening("auto")
        mark = device.mark()
        await device.send_text("hi")
        await device.wait_for("tts", state="stop", after=mark, timeout=5)
        assert len(device.audio_frames) == 5
        assert all(frame.drop_reason != "bad_framing" for frame in device.audio_frames)
        assert len(device.decoded_audio()) > 0


async def hear_whole_reply(device: SimulatedDevice, *, frames: int) -> None:
    """Say "hi" and wait until the device has played the whole reply: `frames` frames, all played."""
    await device.start_listening("auto")
    mark = device.mark()
    await device.send_text("hi")
    await device.wait_for("tts", state="stop", after=mark, timeout=5)
    await device.wait_until_idle(timeout=5)
    assert len(device.audio_frames) == frames and all(frame.played for frame in device.audio_frames)


@pytest.mark.parametrize("on_thread", [True, False])
async def test_downlink_opus_is_encoded_on_the_codec_thread_only_with_a_core_to_spare(make_server, on_thread) -> None:
    server = await make_server(reply_seconds=1.2)
    server.transport.encode_on_thread = on_thread
    jobs = worker_stats().get("opus", {}).get("jobs", 0)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        await hear_whole_reply(device, frames=20)
        assert len(device.decoded_audio()) >= int(1.2 * 24000) * 2 * 0.95
    thread_jobs = worker_stats().get("opus", {}).get("jobs", 0) - jobs
    assert thread_jobs >= 10 if on_thread else thread_jobs == 0  # the pre-buffer is encoded on the loop either way


def websocket_opcodes(written: bytes) -> list[int]:
    """The opcodes of the (unmasked, server-sent) WebSocket frames in one socket write."""
    opcodes, i = [], 0
    while i < len(written):
        opcode, length = written[i] & 0x0F, written[i + 1] & 0x7F
        i += 2
        if length >= 126:
            size = 2 if length == 126 else 8
            length, i = int.from_bytes(written[i : i + size], "big"), i + size
        opcodes.append(opcode)
        i += length
    return opcodes


async def test_typed_text_with_a_lone_surrogate_is_answered_and_the_connection_stays_open(make_server) -> None:
    server = await make_server(reply_seconds=0.3)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        mark = device.mark()
        await device.send_raw('{"type":"listen","state":"detect","text":"hi \\ud800"}')
        stt = await device.wait_for("stt", after=mark)
        assert stt["text"] == "hi \ufffd"
        await device.wait_for("tts", state="stop", after=mark, timeout=5)
        mark = device.mark()
        await device.send_text("still there?")
        assert (await device.wait_for("stt", after=mark))["text"] == "still there?"


async def test_paced_audio_frames_leave_in_groups_one_socket_write_each(make_server) -> None:
    server = await make_server(reply_seconds=1.2)
    server.transport.encode_on_thread = False  # every frame is ready when due: the groups are exact
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        transport = server.transport._sockets[next(iter(server.transport.connections))].transport
        writes: list[bytes] = []
        write = transport.write

        def record(data: bytes) -> None:
            writes.append(bytes(data))
            write(data)

        transport.write = record
        transport.writelines = lambda chunks: record(b"".join(chunks))  # one write, as before Python 3.12
        await hear_whole_reply(device, frames=20)
        audio_per_write = [n for n in (websocket_opcodes(w).count(0x2) for w in writes) if n]
        assert sum(audio_per_write) == 20
        # The pre-buffer (and the rest of the group due next) as the TTS audio arrives (the pacer's
        # kick: the first frames do not wait for its task), then groups of PACED_FRAMES_PER_WAKEUP.
        group = PACED_FRAMES_PER_WAKEUP
        first = 5 + group - 1
        head = next(k for k in range(1, len(audio_per_write) + 1) if sum(audio_per_write[:k]) >= first)
        # A wakeup a busy machine delays sends every frame due by then in its one write (seen: a
        # group of 5 under load average 14), so a group holds at least PACED_FRAMES_PER_WAKEUP.
        assert sum(audio_per_write[:head]) == first, audio_per_write
        assert audio_per_write[head:-1] and min(audio_per_write[head:-1]) >= group, audio_per_write


async def test_writes_to_a_closed_connection_raise_connection_closed_batched_or_not(make_server) -> None:
    server = await make_server()
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        session_id = next(iter(server.transport.connections))
        socket = server.transport._sockets[session_id]
    await asyncio.wait_for(socket.wait_closed(), 2)
    server.transport._sockets[session_id] = socket  # closed, but not yet forgotten by its session
    with pytest.raises(ConnectionClosed):
        await server.transport._do_write(session_id, b"a")
    with pytest.raises(ConnectionClosed):
        await server.transport._do_write_batch(session_id, [b"a", b"b"])
    del server.transport._sockets[session_id]  # forgotten
    with pytest.raises(ConnectionClosed):
        await server.transport._do_write_batch(session_id, [b"a", b"b"])


@pytest.mark.parametrize(
    ("cores", "workers", "on_thread"), [(2, 2, False), (2, None, True), (4, 2, True), (1, 1, False)]
)
def test_the_server_encodes_on_the_loop_when_every_core_runs_a_worker(monkeypatch, cores, workers, on_thread) -> None:
    monkeypatch.setattr(vixio.app.server, "cpu_count", lambda: cores)
    config = VixioConfig.model_validate({"server": {"workers": workers}})
    assert vixio.app.server.VixioServer(config, lambda context: None).transport.encode_on_thread is on_thread


async def test_uplink_accepts_20ms_frames_and_tiny_dtx_packets(make_server) -> None:
    server = await make_server()
    async with SimulatedDevice(ws_url=ws_url(server), uplink_frame_ms=20) as device:
        await device.connect()
        await device.start_listening("auto")
        sent = await device.stream_audio(b"\x00\x00" * 8000, realtime=False)  # 0.5 s of silence
        await device.send_raw(b"")
        await device.send_raw(b"\xf8\xff\xfe")  # a 3-byte DTX packet
        await asyncio.sleep(0.2)
        (connection,) = server.transport.connections.values()
        assert sent == 25 and connection.audio_frames_in >= 25
        assert device.audio_frames == []  # microphone audio that no station consumed is never echoed


async def test_audio_before_listen_start_is_not_fed_to_the_pipeline(make_server) -> None:
    server = await make_server()
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        encoder = OpusEncoder(16000)
        for _ in range(10):
            await device.send_raw(encoder.encode(b"\x10\x00" * 960))
        await asyncio.sleep(0.1)
        (connection,) = server.transport.connections.values()
        assert connection.audio_frames_in == 0


async def test_wake_word_gets_the_greeting_and_other_detect_text_is_an_utterance(make_server) -> None:
    server = await make_server(greeting="Hello there!")
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        mark = device.mark()
        await device.wake_word("你好小智")
        greeting = await device.wait_for("tts", state="sentence_start", after=mark)
        assert greeting["text"] == "Hello there!"
        await device.wait_for("tts", state="stop", after=mark)
        assert server.stations[0].heard == []  # the wake word is not a question


async def test_auth_rejects_missing_and_expired_tokens_and_accepts_ota_tokens(make_server) -> None:
    server = await make_server(auth={"enabled": True, "secret": "s3cret", "token_ttl": 60})
    headers = {"Device-Id": "aa:bb:cc:dd:ee:ff", "Client-Id": "c-1"}
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(ws_url(server), additional_headers=headers):
            pass
    assert info.value.response.status_code == 401
    expired = issue_token("s3cret", "c-1", "aa:bb:cc:dd:ee:ff", now=time.time() - 3600)
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(
            ws_url(server), additional_headers={**headers, "Authorization": f"Bearer {expired}"}
        ):
            pass
    async with SimulatedDevice(ota_url=server.ota.url) as device:
        ota = await device.run_ota()
        assert ota["websocket"]["token"]
        await device.connect()


async def test_idle_sessions_are_closed_after_a_goodbye(make_server) -> None:
    server = await make_server(idle_timeout=0.5, idle_goodbye="Bye for now.")
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        started = time.monotonic()
        goodbye = await device.wait_for("tts", state="sentence_start", timeout=5)
        assert goodbye["text"] == "Bye for now."
        await device.wait_closed(timeout=5)
        assert 0.4 < time.monotonic() - started < 5
    assert not server.transport.connections


async def test_mcp_messages_bypass_the_pipeline_to_the_sessions_peer(make_server) -> None:
    received: list[dict] = []

    class Peer:
        def on_mcp_message(self, payload: dict) -> None:
            received.append(payload)

    server = await make_server()

    original = server.transport._pipeline_factory

    async def factory(context):
        context.transport.set_mcp_peer(context.session_id, Peer())
        return await original(context)

    server.transport._pipeline_factory = factory
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        await device.send_json({"session_id": "", "type": "mcp", "payload": {"jsonrpc": "2.0", "id": 7, "result": {}}})
        for _ in range(50):
            if received:
                break
            await asyncio.sleep(0.01)
        assert received == [{"jsonrpc": "2.0", "id": 7, "result": {}}]
        assert server.stations[0].heard == []  # nothing of it reached the pipeline


async def test_server_messages_system_alert_custom(make_server) -> None:
    server = await make_server()
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        (session_id,) = server.transport.connections
        mark = device.mark()
        await server.transport.send_alert(session_id, "Warning", "Battery low", "sad")
        await server.transport.send_custom(session_id, {"message": "hi"})
        await server.transport.send_emotion(session_id, "happy")
        await server.transport.send_system(session_id, "reboot")
        assert (await device.wait_for("alert", after=mark))["message"] == "Battery low"
        assert (await device.wait_for("custom", after=mark))["payload"] == {"message": "hi"}
        assert (await device.wait_for("llm", after=mark))["emotion"] == "happy"
        assert (await device.wait_for("system", after=mark))["command"] == "reboot"


async def test_metrics_endpoint_lists_sessions_and_turn_latencies(make_server) -> None:
    import aiohttp

    server = await make_server(reply_seconds=0.3)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        mark = device.mark()
        await device.send_text("hi")
        await device.wait_for("tts", state="stop", after=mark)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{server.ota.port}/metrics.json") as response:
                assert response.status == 200
                body = await response.json()
    assert body["sessions"] == 1
    (turn,) = body["detail"][0]["turns"]
    assert "first_frame_sent" in turn["ms"]


async def test_bare_tcp_connects_log_no_warning_and_no_traceback(make_server) -> None:
    """A load balancer's health check (connect, close) or a truncated request: at most one short
    DEBUG line each, never "opening handshake failed" with a traceback."""
    import sys
    from io import StringIO

    from loguru import logger

    server = await make_server()
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG", format="{level} {message}")
    stderr, sys.stderr = sys.stderr, StringIO()  # the stdlib's last-resort handler writes here
    try:
        for payload in (b"", b"", b"GET / HTTP/1.1\r\nHost: x\r\n"):
            _, writer = await asyncio.open_connection("127.0.0.1", server.transport.port)
            if payload:
                writer.write(payload)
                await writer.drain()
            writer.close()
        await asyncio.sleep(0.5)
        leaked = sys.stderr.getvalue()
    finally:
        sys.stderr = stderr
        logger.remove(sink)
    about = [line for line in lines if "health check" in line or "handshake" in line or "refused" in line]
    assert len(about) == 3 and all(line.startswith("DEBUG") for line in about), about
    assert all("\n" not in line.strip() for line in about)
    assert "Traceback" not in leaked and "handshake failed" not in leaked


async def test_startup_heap_is_frozen_so_a_full_collection_does_not_stall_sessions(make_server) -> None:
    """Everything loaded before serving is out of the collector's reach: a full collection
    (which walked ~200,000 objects, ~160 ms with the voice stack loaded) is now short."""
    import gc

    await make_server()
    assert gc.get_freeze_count() > 10_000
    assert gc.get_threshold()[0] >= 10_000
    started = time.perf_counter()
    gc.collect()
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize("complexity", [0, 10])
async def test_opus_complexity_sets_the_downlink_encoder(make_server, complexity) -> None:
    server = await make_server(reply_seconds=1.2, opus_complexity=complexity)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        (connection,) = server.transport.connections.values()
        await hear_whole_reply(device, frames=20)
        assert connection.downlink.encoder._encoder.complexity == complexity  # read back from libopus
        assert len(device.decoded_audio()) >= int(1.2 * 24000) * 2 * 0.95


def test_opus_complexity_outside_0_to_10_is_refused_by_key() -> None:
    with pytest.raises(ValueError, match="opus_complexity"):
        VixioConfig.model_validate({"xiaozhi": {"opus_complexity": 11}})
