"""Profiles end to end: a real server, simulated devices over real WebSockets, the scripted model
and an OpenAI-compatible TTS on loopback. What is asserted is what the model and the TTS RECEIVE
for each device: its profile's instructions, model, tools and voice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.speech_servers import SlowSpeechServer

pytestmark = pytest.mark.process

KIDS = "aa:bb:cc:00:00:01"
ADULT = "aa:bb:cc:00:00:02"
KIDS_PROMPT = "You talk with children. Use small words."


@pytest.fixture
async def tts() -> AsyncIterator[SlowSpeechServer]:
    async with SlowSpeechServer() as server:
        yield server


def profiles_config(llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
        "agent": {
            "provider": "litellm",
            "model": "openai/house-model",
            "api_base": llm.base_url,
            "api_key": "t",
            "system_prompt": "You are the house assistant.",
        },
        "tts": {"provider": "openai", "api_base": tts.base_url, "voice": "alloy", "fallback": None},
        "state": {"path": str(tmp_path / "data" / "state.db")},
        "profiles": {
            "kids": {
                "description": "for the children's room",
                "instructions": KIDS_PROMPT,
                "voice": "nova",
                "model": "openai/kids-model",
                "greeting": "Hello, friend!",
                "tools": {"toggles": {"get_time": False}},
            }
        },
        "devices": {KIDS.upper(): "kids"},
        **overrides,
    }


async def start(config: dict[str, Any]) -> VixioServer:
    server = VixioServer(VixioConfig.model_validate(config))
    await server.start()
    return server


def url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


async def ask(device: SimulatedDevice, text: str) -> None:
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=15)


def system(llm: ScriptedLLMServer, request: int) -> str:
    return next(m["content"] for m in llm.messages(request) if m["role"] == "system")


async def test_two_devices_on_two_profiles_get_their_own_instructions_model_tools_voice_and_memory(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Hi kiddo."), Reply.text("Good evening."))
    config = profiles_config(llm, tts, tmp_path)
    config["profiles"]["kids"]["memory"] = {"enabled": False}
    server = await start(config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=KIDS) as kids:
            await kids.connect()
            await ask(kids, "hello")
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=ADULT) as adult:
            await adult.connect()
            await ask(adult, "hello")
        deadline = asyncio.get_running_loop().time() + 10
        while not await server.store.recent_turns(ADULT, 5) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert [t.assistant for t in await server.store.recent_turns(ADULT, 5)] == ["Good evening."]
        assert await server.store.recent_turns(KIDS, 5) == []  # the kids profile stores nothing
    finally:
        await server.stop()
    assert system(llm, 0).startswith(KIDS_PROMPT) and system(llm, 1).startswith("You are the house assistant.")
    assert [llm.requests[n]["model"] for n in (0, 1)] == ["kids-model", "house-model"]
    assert llm.tool_names(0) == ["get_date"] and sorted(llm.tool_names(1)) == ["get_date", "get_time"]
    assert [(r.text, r.voice) for r in tts.requests] == [("Hi kiddo.", "nova"), ("Good evening.", "alloy")]


async def test_the_wake_word_is_answered_with_the_profiles_greeting(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    server = await start(profiles_config(llm, tts, tmp_path))
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=KIDS) as kids:
            await kids.connect()
            mark = kids.mark()
            await kids.send_json({"type": "listen", "state": "detect", "text": "你好小智"})
            await kids.wait_for("tts", state="stop", after=mark, timeout=15)
    finally:
        await server.stop()
    assert [(r.text, r.voice) for r in tts.requests] == [("Hello, friend!", "nova")]
