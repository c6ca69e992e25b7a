"""Long-term memory, end to end: what the device's user said in one conversation reaches the
model's instructions in the next, after a server restart, through the scripted model on loopback;
and the offline default keeps the turns verbatim."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from vixio.memory.long_term import MEMORY_NOTE, VerbatimMemory
from vixio.state.store import StoredTurn
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

from .test_resume import ALICE, conversation, hang_up, say, start, until, url

pytestmark = pytest.mark.integration

FACTS = "The user is Alice. She likes green tea."
ALICE_SISTER = f"{ALICE} and my sister Mary visits on Sundays"
FACTS_JSON = (
    '{"facts": [{"kind": "name", "value": "Alice"}, {"kind": "like", "value": "green tea"}, '
    '{"kind": "family", "value": "sister Mary", "detail": "sister"}, {"kind": "like", "value": "jazz"}]}'
)
"""What the scripted model extracts: "jazz" was never said (an invention the check drops); the
sister was said in a way the rules miss ("... and my sister Mary ...")."""


def system(messages: list[dict[str, Any]]) -> str:
    return next(m["content"] for m in messages if m["role"] == "system")


async def test_alice_is_remembered_across_a_restart_and_forgotten_after_clear(
    llm: ScriptedLLMServer, tmp_path: Path, state_config: dict[str, Any]
) -> None:
    """`long_term: model`: the model's JSON facts, checked against what she said, join the rules'."""
    no_resume = {"resume_minutes": 0, "long_term": "model"}
    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text(FACTS_JSON))
    server = await start(llm, tmp_path, memory=no_resume, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE_SISTER)
            await hang_up(server, device)
        await until(lambda: len(llm.requests) == 2, 10, "the facts at the conversation's end")
        await asyncio.sleep(0.3)  # their write
    finally:
        await server.stop()
    update = llm.messages(1)
    assert "lasting facts" in system(update) and f"User: {ALICE_SISTER}" in update[-1]["content"]
    assert "Nice to meet you" not in update[-1]["content"]  # the assistant's words are not sent
    assert "- Name: Alice" in update[-1]["content"]  # the rules' facts were known first

    llm.expect(Reply.text("Your name is Alice."), Reply.text('{"facts": []}'), Reply.text("I do not know your name."))
    server = await start(llm, tmp_path, memory=no_resume, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=device.device_id) as again:
            await again.connect()
            await say(again, "what is my name")
            instructions = system(llm.messages(2))
            assert MEMORY_NOTE.format(memory="").strip() in instructions
            for line in ("- Name: Alice (", "- Likes: green tea (", "- Family: sister Mary ("):
                assert line in instructions, instructions
            assert "jazz" not in instructions  # the model's invention is not stored
            assert conversation(llm.messages(2)) == [("user", "what is my name")]  # no resume: memory only
            await hang_up(server, again)
            await until(lambda: len(llm.requests) == 4, 10, "the second extraction")
            await server.store.forget_device(device.device_id)  # what `vixio memory clear` does
            await again.connect()
            await say(again, "what is my name")
        assert "What you remember" not in system(llm.messages(4))
    finally:
        await server.stop()


async def test_the_verbatim_memory_carries_the_turns_as_said(llm: ScriptedLLMServer, tmp_path: Path) -> None:
    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text("Your name is Alice."))
    server = await start(llm, tmp_path, memory={"resume_minutes": 0, "long_term": "verbatim"})
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await hang_up(server, device)

            async def remembered() -> str:
                memory = await server.store.memory(device.device_id)
                return memory.text if memory is not None else ""

            deadline = time.monotonic() + 10
            while not await remembered() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await remembered() == f"User: {ALICE}\nAssistant: Nice to meet you, Alice."
            await device.connect()
            await say(device, "what is my name")
        assert f"User: {ALICE}" in system(llm.messages(1)) and len(llm.requests) == 2  # no model call to summarise
    finally:
        await server.stop()


async def test_verbatim_keeps_the_latest_whole_lines_within_the_bound() -> None:
    turns = [StoredTurn("c", n, f"question {n}", f"answer {n}", at=0) for n in range(10)]
    assert await VerbatimMemory(60).update("User: older", turns) == (
        "Assistant: answer 8\nUser: question 9\nAssistant: answer 9"
    )  # 56 characters; a cut line is left out
    assert await VerbatimMemory(4000).update("User: older", turns[:1]) == (
        "User: older\nUser: question 0\nAssistant: answer 0"
    )


async def test_an_erasure_while_the_model_writes_the_memory_wins(
    llm: ScriptedLLMServer, tmp_path: Path, state_config: dict[str, Any]
) -> None:
    """`vixio memory clear` (another process) lands while the model is still summarising."""
    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text(FACTS_JSON, delay=1.5))
    server = await start(llm, tmp_path, memory={"resume_minutes": 0, "long_term": "model"}, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await hang_up(server, device)
        await until(lambda: len(llm.requests) == 2, 10, "the memory update to start")
        await server.store.forget_device(device.device_id)
        await asyncio.sleep(2.0)  # the summary arrives
        assert await server.store.memory(device.device_id) is None
        assert await server.store.recent_turns(device.device_id, limit=10) == []
        assert await server.store.facts(device.device_id) == []
    finally:
        await server.stop()
