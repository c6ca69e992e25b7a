"""Hostile WebSocket frames and handshakes (issue #11 items 4 and 9) against the real server:
deep JSON closes with 1008 and a reason, oversize with 1009; a text `audio` frame, an exotic
Protocol-Version and a non-canonical token are refused cleanly; bad frames are logged a few
times per session, then counted; audio flooded faster than real time is dropped past a burst."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from vixio.testing.device import SimulatedDevice
from vixio.transports.xiaozhi.protocol.messages import TEXT_TOO_LONG
from vixio.transports.xiaozhi.session.auth import issue_token

from .conftest import ws_url
from .hostile import TURN_BOUND, Bystander, captured_logs

pytestmark = pytest.mark.integration

HELLO = json.dumps({"type": "hello", "version": 1, "transport": "websocket"})


async def test_100k_nested_brackets_close_with_1008_a_reason_and_one_log_line(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with captured_logs("INFO") as logs, Bystander(server) as bystander:
        async with websockets.connect(ws_url(server), additional_headers={"Device-Id": "aa:00:00:00:00:0a"}) as ws:
            await ws.send(HELLO)
            await ws.send("[" * 100_000)
            await asyncio.wait_for(ws.wait_closed(), 5)
        assert ws.close_code == 1008 and "nested deeper than 64" in ws.close_reason
        assert await bystander.turn() < TURN_BOUND
    assert len(logs.lines("closing the connection (1008)")) == 1
    assert logs.tracebacks() == []


async def test_an_oversize_frame_closes_with_1009_and_one_log_line(make_server) -> None:
    server = await make_server(max_message_bytes=4096)
    async with captured_logs("INFO") as logs:
        async with websockets.connect(ws_url(server), additional_headers={"Device-Id": "aa:00:00:00:00:0b"}) as ws:
            await ws.send(HELLO)
            await ws.recv()
            await ws.send(b"\x00" * 10_000)
            await asyncio.wait_for(ws.wait_closed(), 5)
        assert ws.close_code == 1009
        await asyncio.sleep(0.1)
    assert len(logs.lines("closed the connection (1009)")) == 1
    assert logs.tracebacks() == []


async def test_a_text_audio_frame_is_dropped_without_a_traceback(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with captured_logs("INFO") as logs, Bystander(server) as bystander:
        await bystander.device.send_raw('{"type":"audio"}')
        await bystander.device.send_raw('{"type":"audio","data":"AAAA"}')
        assert await bystander.turn() < TURN_BOUND
    assert len(logs.lines("type 'audio'")) == 2
    assert logs.tracebacks() == []


@pytest.mark.parametrize("version", ["%C2%B2", "%EF%BC%92", "99999999999999999999", "-1", "%00"])
async def test_an_exotic_protocol_version_query_gets_no_500(make_server, version: str) -> None:
    server = await make_server()
    async with captured_logs("INFO") as logs:
        url = ws_url(server) + f"?device-id=aa:00:00:00:00:0c&protocol-version={version}"
        async with websockets.connect(url) as ws:
            await ws.send(HELLO)
            hello = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert hello["type"] == "hello" and hello["version"] in (1, 2, 3)
    assert logs.tracebacks() == []


async def test_a_token_with_a_leading_zero_timestamp_is_refused(make_server) -> None:
    server = await make_server(auth={"enabled": True, "secret": "s3cret"})
    device, client = "aa:00:00:00:00:0d", "c-1"
    token = issue_token("s3cret", client, device)
    signature, stamp = token.rsplit(".", 1)
    headers = {"Device-Id": device, "Client-Id": client}
    async with websockets.connect(ws_url(server), additional_headers={**headers, "Authorization": f"Bearer {token}"}):
        pass
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(
            ws_url(server), additional_headers={**headers, "Authorization": f"Bearer {signature}.0{stamp}"}
        ):
            pass
    assert refused.value.response.status_code == 401


async def test_malformed_frames_are_logged_a_few_times_then_counted(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with captured_logs("INFO") as logs:
        async with Bystander(server) as bystander:
            for _ in range(3000):
                await bystander.device.send_raw("not json")
            assert await bystander.turn() < TURN_BOUND
        for _ in range(100):  # the session's closing summary comes once the server saw the close
            await asyncio.sleep(0.05)
            if logs.lines("3000 in all"):
                break
    dropped = logs.lines("malformed frame")
    assert 5 <= len(dropped) <= 8, [r.message for r in dropped]
    assert any("3000 in all" in r.message for r in dropped)


async def test_messages_before_the_hello_are_logged_a_few_times_only(make_server) -> None:
    server = await make_server()
    async with captured_logs("INFO") as logs:
        async with websockets.connect(ws_url(server), additional_headers={"Device-Id": "aa:00:00:00:00:0e"}) as ws:
            for _ in range(500):
                await ws.send(json.dumps({"type": "listen" * 100, "state": "start"}))
            await ws.send(HELLO)
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "hello"
    lines = logs.lines("before hello")
    assert len(lines) == 3 and all(len(r.message) < 100 for r in lines)


async def test_an_oversize_typed_utterance_is_dropped_not_sent_to_the_model(make_server) -> None:
    server = await make_server(reply_seconds=0.2)
    async with captured_logs("INFO") as logs, Bystander(server) as bystander:
        mark = bystander.device.mark()
        await bystander.device.send_json({"type": "listen", "state": "detect", "text": "x" * 100_000})
        told = await bystander.device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
        assert told["text"] == TEXT_TOO_LONG["en"]  # the user is told, not left waiting
        await bystander.device.wait_for("tts", state="stop", after=mark, timeout=10)
        assert await bystander.turn("short one") < TURN_BOUND
    station = server.stations[-1]  # type: ignore[attr-defined]
    assert station.heard == ["short one"]
    assert len(logs.lines("listen text of 100000 characters")) == 1


async def test_audio_flooded_faster_than_real_time_is_dropped_past_the_burst_with_one_log_line(make_server) -> None:
    server = await make_server(reply_seconds=0.2, audio_burst_seconds=2.0)
    async with captured_logs("INFO") as logs, Bystander(server) as bystander:
        flooder = SimulatedDevice(ws_url=ws_url(server), device_id="aa:00:00:00:00:0f")
        async with flooder:
            await flooder.connect()
            await flooder.start_listening("auto")
            started = time.monotonic()
            sent = await flooder.stream_audio(b"\x10\x00" * 16000 * 12, realtime=False)  # 12 s at once
            elapsed = time.monotonic() - started
            await asyncio.sleep(0.2)
            connection = next(c for c in server.transport.connections.values() if c.device_id == "aa:00:00:00:00:0f")
            assert sent == 200
            # 2 s of burst plus what real time allowed while sending, never the whole 12 s.
            assert int(2.0 / 0.06) <= connection.audio_frames_in <= (2.0 + elapsed + 0.2) / 0.06 + 1
            assert await bystander.turn() < TURN_BOUND
        bystander_connection = next(c for c in server.transport.connections.values())
        assert bystander_connection.device_id == "aa:bb:cc:00:00:01"
    assert len(logs.lines("faster than real time", level="WARNING")) == 1
    assert logs.tracebacks() == []
