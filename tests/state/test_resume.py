"""Resume, end to end: a real server, a simulated device over a real WebSocket, an openai-agents
Agent over litellm against the scripted model on loopback, and the store on both backends (an
SQLite file on disk, a real redis-server). What is asserted is what the model RECEIVES after the
device comes back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

from .conftest import StoreFactory

pytestmark = pytest.mark.integration

ALICE = "my name is Alice and I like green tea"


async def start(llm: ScriptedLLMServer, tmp_path: Path, **overrides: Any) -> VixioServer:
    """A server on loopback; `state=` a `state_config` (tests/state/conftest.py), else SQLite under `tmp_path`."""
    config: dict[str, Any] = {
        "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
        "agent": {"provider": "litellm", "model": "openai/test-model", "api_base": llm.base_url, "api_key": "t"},
        "state": {"path": str(tmp_path / "data" / "state.db")},
        **overrides,
    }
    server = VixioServer(VixioConfig.model_validate(config))
    await server.start()
    return server


def url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


async def until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def say(device: SimulatedDevice, text: str) -> None:
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=15)


async def hang_up(server: VixioServer, device: SimulatedDevice) -> None:
    """The firmware closes the channel after an idle period; wait until the server saw it."""
    await device.close()
    await until(lambda: not server.transport.connections, 10, "the session to end")


def conversation(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages if m["role"] in ("user", "assistant")]


async def test_a_device_that_reconnects_continues_its_conversation(
    llm: ScriptedLLMServer, tmp_path: Path, state_config: dict[str, Any]
) -> None:
    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text("Your name is Alice."), Reply.text("Hello."))
    server = await start(llm, tmp_path, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await hang_up(server, device)
            await device.connect()  # the same device, a new session
            await say(device, "what is my name")
        assert conversation(llm.messages(1)) == [
            ("user", ALICE),
            ("assistant", "Nice to meet you, Alice."),
            ("user", "what is my name"),
        ]
        # Another device starts its own conversation.
        async with SimulatedDevice(ws_url=url(server), mcp=False) as stranger:
            await stranger.connect()
            await say(stranger, "what is my name")
        assert conversation(llm.messages(2)) == [("user", "what is my name")]
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_a_restarted_server_resumes_too_and_turns_are_bounded(
    llm: ScriptedLLMServer, tmp_path: Path, state_config: dict[str, Any]
) -> None:
    memory = {"max_turns": 2}
    llm.expect(*(Reply.text(f"Answer {n}.") for n in range(4)))
    server = await start(llm, tmp_path, memory=memory, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            for n in range(3):
                await say(device, f"question {n}")
            await hang_up(server, device)
    finally:
        await server.stop()
    server = await start(llm, tmp_path, memory=memory, state=state_config)  # another process would read the same store
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=device.device_id) as again:
            await again.connect()
            await say(again, "question 3")
        assert conversation(llm.messages(3)) == [
            ("user", "question 1"),
            ("assistant", "Answer 1."),
            ("user", "question 2"),
            ("assistant", "Answer 2."),
            ("user", "question 3"),
        ]
    finally:
        await server.stop()


async def test_after_resume_minutes_the_conversation_starts_afresh(llm: ScriptedLLMServer, tmp_path: Path) -> None:
    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text("I do not know."))
    server = await start(llm, tmp_path, memory={"resume_minutes": 0.01})  # 0.6 s
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await hang_up(server, device)
            await asyncio.sleep(1.0)
            await device.connect()
            await say(device, "what is my name")
        assert conversation(llm.messages(1)) == [("user", "what is my name")]
        # Both conversations are kept (history), only the resume window passed.
        turns = await server.store.recent_turns(device.device_id, limit=10)
        assert [t.user for t in turns] == [ALICE, "what is my name"]
        assert turns[0].conversation != turns[1].conversation
    finally:
        await server.stop()


async def test_memory_disabled_stores_nothing(
    llm: ScriptedLLMServer, tmp_path: Path, open_client: StoreFactory, state_config: dict[str, Any]
) -> None:
    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text("I do not know."))
    server = await start(llm, tmp_path, memory={"enabled": False}, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await hang_up(server, device)
            await device.connect()
            await say(device, "what is my name")
        assert conversation(llm.messages(1)) == [("user", "what is my name")]
    finally:
        await server.stop()
    store = await open_client()
    assert await store.recent_turns(device.device_id, limit=10) == []
    assert await store.memory(device.device_id) is None


async def test_memory_disabled_leaves_nothing_of_the_conversation_in_the_file(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    """Not a turn, not a memory (the model-written one included), not a held result: the file's
    bytes, its WAL too, hold nothing the user said."""
    import sqlite3

    llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text("I do not know."))
    path = tmp_path / "data" / "state.db"
    server = await start(llm, tmp_path, memory={"enabled": False, "long_term": "model"})
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await hang_up(server, device)
            await asyncio.sleep(0.5)  # a conversation's end would start its memory update here
            await device.connect()
            await say(device, "what is my name")
            seen = b"".join(p.read_bytes() for p in path.parent.glob("state.db*"))
            assert b"Alice" not in seen and b"green tea" not in seen
        assert len(llm.requests) == 2  # no memory update asked of the model
    finally:
        await server.stop()
    seen = b"".join(p.read_bytes() for p in path.parent.glob("state.db*"))
    assert b"Alice" not in seen and b"green tea" not in seen and b"what is my name" not in seen
    with sqlite3.connect(path) as raw:
        for table in ("turns", "memories", "held_results", "profile_assignments"):
            assert raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table


async def test_a_full_state_file_costs_one_error_and_no_turn(llm: ScriptedLLMServer, tmp_path: Path) -> None:
    from loguru import logger

    llm.expect(*(Reply.text("Still here. " * 300) for _ in range(8)))
    lines: list[tuple[str, str]] = []
    sink = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])), level="INFO")
    server = await start(llm, tmp_path, state={"path": str(tmp_path / "state.db"), "max_mb": 0.16})
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            for n in range(8):  # each turn about 4 KB, the cap 164 KB (a new file is 144): reached on the way
                await say(device, f"turn {n} " + "words " * 50)
        stored = await server.store.recent_turns(device.device_id, limit=100)
        assert 0 < len(stored) < 8 and len(llm.requests) == 8
        errors = [message for level, message in lines if level == "ERROR"]
        assert errors and "state.max_mb cap" in errors[0] and "the conversations go on" in errors[0]
        # One line per episode, not per lost write: a second error only after a write fitted again
        # (a small one may, in the pages the failed ones left; how writes coalesce depends on timing).
        episodes = [level == "ERROR" for level, message in lines if level == "ERROR" or "writes work again" in message]
        assert all(a != b for a, b in zip(episodes, episodes[1:], strict=False)), lines
    finally:
        logger.remove(sink)
        await server.stop()
