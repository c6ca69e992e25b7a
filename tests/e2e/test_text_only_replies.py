"""Text only (`tts: null`), end to end: the real server, a simulated device typing its turns and a
scripted LLM on loopback. The device shows the reply's sentences and must get `tts stop` after
every `tts start`, also when the turn fails mid-reply or is cut off by an abort; otherwise it
stays in `speaking` and never listens again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration

APOLOGY = "Sorry, something went wrong. Please try again."


async def start(llm: ScriptedLLMServer) -> VixioServer:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "agent": {"provider": "litellm", "model": "openai/test-model", "api_base": llm.base_url, "api_key": "test"},
            "tts": None,
        }
    )
    server = VixioServer(config)
    await server.start()
    return server


def ws_url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


def tts_states(device: SimulatedDevice, after: int) -> list[tuple[str, Any]]:
    return [(m.data["state"], m.data.get("text")) for m in device.received[after:] if m.type == "tts"]


async def next_turn_works(device: SimulatedDevice, llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.text("I am back."))
    mark = device.mark()
    await device.send_text("and now")
    await device.wait_for("tts", state="stop", after=mark, timeout=10)
    assert tts_states(device, mark) == [("start", None), ("sentence_start", "I am back."), ("stop", None)]
    assert device.decoded_audio() == b""  # text only


async def test_a_reply_that_breaks_off_ends_with_the_apology_and_tts_stop(llm: ScriptedLLMServer) -> None:
    text = "The first sentence is complete. Partial answer that will be cut off here."
    llm.expect(Reply.faulty("reset", text, after=9, delta_delay=0.02))  # "...complete. Partial answer that will be"
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("tell me something")
            await device.wait_for("tts", state="stop", after=mark, timeout=10)
            assert tts_states(device, mark) == [
                ("start", None),
                ("sentence_start", "The first sentence is complete."),
                ("sentence_start", APOLOGY),
                ("stop", None),
            ]
            await device.wait_for_state("listening", timeout=5)
            await next_turn_works(device, llm)
    finally:
        await server.stop()
    assert llm.faults_served == 1


async def test_an_aborted_reply_gets_tts_stop_and_nothing_after_it(llm: ScriptedLLMServer) -> None:
    text = "One. " + " ".join(f"Sentence number {n} is here." for n in range(40))
    llm.expect(Reply.text(text, delta_delay=0.05))  # ~8 s of streaming
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("tell me a long story")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
            assert device.state == "speaking"
            aborted = device.mark()
            await device.abort()
            await device.wait_for("tts", state="stop", after=aborted, timeout=5)
            await device.wait_for_state("listening", timeout=5)
            await asyncio.sleep(1.0)  # the cancelled reply must not come back
            assert [state for state, _ in tts_states(device, aborted)] == ["stop"]
            await next_turn_works(device, llm)
    finally:
        await server.stop()
