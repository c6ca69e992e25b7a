"""Reminders that fire (vixio/app/reminders.py) on a real server in this process: the scripted
model sets one by voice and it is spoken once at the conversation's next pause; one that fired
while the device was away is the first words of its next session, marked missed; an idle device
reachable by push gets `notify`, whose Ogg/Opus file (espeak's voice, the project's Opus encoder)
is fetched by URL, decoded by FFmpeg's decoder (PyAV) and then expires; an operator message to a
device goes the same way. Real WebSockets, real SQLite, loopback only."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.state.test_resume import hang_up, say, start, until, url
from vixio.app.server import VixioServer
from vixio.state.reminders import Reminder
from vixio.testing.device import ReceivedMessage, SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration

DEVICE = "02:00:00:00:7e:01"
VOICE = {
    "tts": {"provider": "espeak", "voice": "en-us"},
    "tools": {"builtin": ["get_time", "reminders"]},
    "reminders": {"notify": {"ttl_seconds": 2.0, "url_base": "http://127.0.0.1:0"}},
}


async def serve(llm: ScriptedLLMServer, tmp_path: Path) -> VixioServer:
    server = await start(llm, tmp_path, **VOICE)
    server.config.reminders.notify.url_base = f"http://127.0.0.1:{server.ota.port}"
    return server


def sentences(device: SimulatedDevice, after: int = 0) -> list[str]:
    return [
        m.data["text"]
        for m in device.received[after:]
        if isinstance(m, ReceivedMessage) and m.type == "tts" and m.data.get("state") == "sentence_start"
    ]


async def played(device: SimulatedDevice, text: str, after: int) -> None:
    """Until `text` was said and played to its end: a device hanging up before then would hear
    it again in its next session (it counts as delivered only once all of it went out)."""
    await until(lambda: text in sentences(device, after), 15, repr(text))
    said = next(
        i
        for i, m in enumerate(device.received)
        if i >= after and isinstance(m, ReceivedMessage) and m.data.get("text") == text
    )
    await device.wait_for("tts", state="stop", after=said, timeout=15)


async def test_a_reminder_set_by_voice_is_spoken_once_at_the_next_pause(llm: ScriptedLLMServer, tmp_path: Path) -> None:
    server = await serve(llm, tmp_path)
    try:
        llm.expect(
            Reply.tool_call("set_reminder", {"text": "take your medicine", "in_seconds": 3}),
            Reply.text("I will remind you in three seconds."),
        )
        async with SimulatedDevice(ws_url=url(server), device_id=DEVICE, mcp=False) as device:
            await device.connect()
            mark = device.mark()
            await say(device, "remind me in three seconds to take my medicine")
            result = llm.messages(1)[-1]
            assert result["role"] == "tool" and result["content"].startswith("Set: [")
            [stored] = await server.store.reminders(DEVICE)
            assert stored.text == "take your medicine" and stored.due == pytest.approx(time.time() + 3, abs=3)
            await played(device, "Reminder: take your medicine.", mark)
            await asyncio.sleep(2.0)  # nothing more comes
            assert sentences(device, mark) == ["I will remind you in three seconds.", "Reminder: take your medicine."]
        assert await server.store.reminders(DEVICE) == [] and await server.store.take_fired(DEVICE) == []
        assert server.reminders.fired_here == 1
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_a_reminder_missed_while_away_is_the_first_words_of_the_next_session(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    server = await serve(llm, tmp_path)
    try:
        async with SimulatedDevice(ws_url=url(server), device_id=DEVICE, mcp=False) as device:
            await device.connect()
            await hang_up(server, device)
            # Due an hour ago (the server was down then): it fires now and waits for the device.
            missed = Reminder.once(DEVICE, "take your medicine", time.time() - 3600, zone="UTC")
            await server.store.put_reminder(missed, per_device=20)
            server.reminders.changed()
            await until(lambda: server.reminders.fired_here == 1, 10, "the claim")
            await asyncio.sleep(0.3)
            mark = device.mark()
            await device.connect()
            first = await device.wait_for("tts", state="sentence_start", after=mark, timeout=15)
            hour = time.strftime("%H:%M", time.gmtime(missed.due))
            assert first["text"] == f"You missed a reminder at {hour}: take your medicine."
            await device.wait_for("tts", state="stop", after=mark, timeout=15)
            await hang_up(server, device)
            mark = device.mark()
            llm.expect(Reply.text("Hello."))
            await device.connect()
            await say(device, "hello")
            assert sentences(device, mark) == ["Hello."]  # told once
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_a_reminder_the_device_hung_up_on_is_said_again_in_its_next_session(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    """The words count as delivered only once they all went out: a session that ends while the
    reminder is being said gives it back, and the next session starts with it (once)."""
    server = await serve(llm, tmp_path)
    try:
        async with SimulatedDevice(ws_url=url(server), device_id=DEVICE, mcp=False) as device:
            await device.connect()
            mark = device.mark()
            await server.store.put_reminder(Reminder.once(DEVICE, "take your medicine", time.time()), per_device=20)
            server.reminders.changed()
            await until(lambda: "Reminder: take your medicine." in sentences(device, mark), 15, "the reminder")
            await hang_up(server, device)  # before its audio was all sent
            back = []
            for _ in range(300):  # given back to the store (claimable again), not kept as said
                back = await server.store.claim_fired(DEVICE, time.time(), time.time() + 1)
                if back:
                    break
                await asyncio.sleep(0.1)
            assert [f.text for f in back] == ["take your medicine"]
            await server.store.settle_fired(DEVICE, [back[0].occurrence], delivered=False)
            mark = device.mark()
            await device.connect()
            await played(device, "Reminder: take your medicine.", mark)
            assert sentences(device, mark)[0] == "Reminder: take your medicine."
            await hang_up(server, device)
            mark = device.mark()
            llm.expect(Reply.text("Hello."))
            await device.connect()
            await say(device, "hello")
            assert sentences(device, mark) == ["Hello."]  # delivered this time: not said again
        assert await server.store.take_fired(DEVICE) == []
        llm.assert_all_consumed()
    finally:
        await server.stop()


class FetchingPush:
    """An idle device reachable by push that plays `notify` as firmware 2.5 does: it fetches the
    file at once (the URL is short-lived) and keeps what it got."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.files: list[bytes] = []

    async def push_to_idle_device(self, device_id: str, message: dict[str, Any]) -> bool:
        self.messages.append({"device_id": device_id, **message})
        if message["type"] == "alert":  # shown with the vibration sound; nothing to fetch
            return True
        async with aiohttp.ClientSession() as http, http.get(message["audio_url"]) as response:
            assert response.status == 200 and response.content_type == "audio/ogg"
            self.files.append(await response.read())
        return True


def decoded_seconds(data: bytes) -> tuple[int, int, float]:
    """(channels, stream rate, seconds) of an Ogg/Opus file decoded by FFmpeg."""
    av = pytest.importorskip("av", reason="PyAV (the edge extra) decodes the files with FFmpeg")

    with av.open(io.BytesIO(data), format="ogg") as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus"
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.codec_context.channels, stream.rate, samples / 48000


async def test_an_idle_device_reachable_by_push_gets_notify_whose_file_decodes_and_expires(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    server = await serve(llm, tmp_path)
    push = FetchingPush()
    server.reminders.idle_push = push
    try:
        await server.store.put_reminder(
            Reminder.once(DEVICE, "the laundry is done. Hang it up", time.time() + 0.5, kind="timer"), per_device=20
        )
        server.reminders.changed()
        await until(lambda: push.files, 30, "the notify")
        alert, message = push.messages
        assert alert == {
            "device_id": DEVICE,
            "type": "alert",
            "status": "Reminder",
            "emotion": "neutral",
            "message": "Time's up: the laundry is done. Hang it up.",
        }
        assert message["type"] == "notify" and message["device_id"] == DEVICE
        assert [s["text"] for s in message["subtitles"]] == ["Time's up: the laundry is done.", "Hang it up."]
        assert message["subtitles"][0]["start_ms"] == 0 < message["subtitles"][1]["start_ms"]
        assert push.files[0][:4] == b"OggS" and push.files[0][28:36] == b"OpusHead"
        assert int.from_bytes(push.files[0][40:44], "little") == 16000  # the rate the firmware decodes at
        channels, rate, seconds = decoded_seconds(push.files[0])
        assert channels == 1 and rate == 48000 and 1.0 < seconds < 10.0
        assert message["subtitles"][1]["start_ms"] / 1000 < seconds
        assert await server.store.take_fired(DEVICE) == []  # delivered: nothing waits for the next session
        await asyncio.sleep(2.2)  # reminders.notify.ttl_seconds
        async with aiohttp.ClientSession() as http, http.get(message["audio_url"]) as response:
            assert response.status == 404
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{server.ota.port}/notify/{'A' * 43}.ogg") as response,
        ):
            assert response.status == 404
    finally:
        await server.stop()


async def test_an_operator_message_reaches_a_device_in_a_conversation_and_one_away(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    server = await serve(llm, tmp_path)
    base = f"http://127.0.0.1:{server.ota.port}"
    try:
        async with (
            SimulatedDevice(ws_url=url(server), device_id=DEVICE, mcp=False) as device,
            aiohttp.ClientSession() as http,
        ):
            await device.connect()
            mark = device.mark()
            async with http.post(base + "/api/say", json={"device": DEVICE, "text": "dinner is ready"}) as response:
                assert response.status == 200, await response.text()
                assert (await response.json())["queued"] is True
            await played(device, "dinner is ready.", mark)
            await hang_up(server, device)
            async with http.post(base + "/api/say", json={"device": DEVICE, "text": "call grandma"}) as response:
                assert response.status == 200
            await until(lambda: server.reminders.fired_here == 2, 10, "the second claim")
            mark = device.mark()
            await device.connect()
            first = await device.wait_for("tts", state="sentence_start", after=mark, timeout=15)
            assert first["text"] == "call grandma."
    finally:
        await server.stop()
