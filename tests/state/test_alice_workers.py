"""Alice and her green tea through `vixio serve --workers 2` on one SQLite file: learnt as facts
(the default `memory.long_term: facts`) and remembered across a server restart (the scripted
model's instructions carry them), erased by `vixio memory clear` while she is connected (and not
learnt again when her session ends), and by the spoken request with its confirmation, in English
and in Mandarin (a device on a `language: zh` profile)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from vixio.memory.forget import ASK, DONE
from vixio.serve.supervisor import reuse_port_supported
from vixio.state.sqlite import SqliteStore
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve, until

from .test_forget import exchange
from .test_long_term import system
from .test_resume import ALICE, conversation

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

ALICE_DEVICE = "02:00:00:00:a1:1c"
ZH_DEVICE = "02:00:00:00:a1:2c"
ZH_ALICE = "我叫爱丽丝，我喜欢绿茶"


async def serve(tmp_path: Path, llm: ScriptedLLMServer) -> ServeProcess:
    process = await start_serve(
        tmp_path,
        llm,
        "--workers",
        "2",
        extra=f"""
state: {{path: {tmp_path / "data" / "state.db"}}}
memory: {{resume_minutes: 0}}
profiles:
  zh: {{language: zh}}
devices:
  "{ZH_DEVICE}": zh
""",
    )
    await process.wait_ready()
    return process


async def requests(llm: ScriptedLLMServer, count: int, what: str) -> None:
    async def reached() -> bool:
        return len(llm.requests) >= count

    await until(reached, 30, what)
    assert len(llm.requests) == count, [m[-1]["content"] for m in map(llm.messages, range(len(llm.requests)))]


async def stored(tmp_path: Path, device: str) -> tuple[list[str], str | None, list[str]]:
    """The device's stored turns (user side), long-term memory and fact values, read from the file."""
    store = SqliteStore(tmp_path / "data" / "state.db")
    await store.open()
    try:
        memory = await store.memory(device)
        return (
            [t.user for t in await store.recent_turns(device, limit=50)],
            memory.text if memory else None,
            [f.value for f in await store.facts(device)],
        )
    finally:
        await store.close()


async def test_alice_across_a_restart_then_erased_by_the_cli_and_by_voice_in_both_languages(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    async with AsyncExitStack() as stack:
        first = await serve(tmp_path, llm)
        stack.push_async_callback(first.stop)
        llm.expect(Reply.text("Nice to meet you, Alice."))
        async with SimulatedDevice(ota_url=first.ota_url, device_id=ALICE_DEVICE, mcp=False) as alice:
            await alice.connect()
            await exchange(alice, ALICE)
        await requests(llm, 1, "Alice's turn")
        await first.stop()
        assert sorted((await stored(tmp_path, ALICE_DEVICE))[2]) == ["Alice", "green tea"]

        second = await serve(tmp_path, llm)  # a restart: only the file remembers
        stack.push_async_callback(second.stop)
        llm.expect(Reply.text("Your name is Alice."), Reply.text("Sunny."))
        async with SimulatedDevice(ota_url=second.ota_url, device_id=ALICE_DEVICE, mcp=False) as alice:
            await alice.connect()
            await exchange(alice, "what is my name")
            instructions = system(llm.messages(1))
            assert "- Name: Alice (" in instructions and "- Likes: green tea (" in instructions
            assert conversation(llm.messages(1)) == [("user", "what is my name")]
            cleared = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "vixio",
                    "memory",
                    "clear",
                    ALICE_DEVICE,
                    "--config",
                    str(tmp_path / "config.yaml"),
                ],
                capture_output=True,
                text=True,
            )
            assert cleared.returncode == 0, cleared.stderr
            assert await stored(tmp_path, ALICE_DEVICE) == ([], None, [])
            await exchange(alice, "what is the weather")
        await requests(llm, 3, "the turn after the clear")
        await asyncio.sleep(0.5)  # the session's end: nothing it learnt before the clear comes back
        assert (await stored(tmp_path, ALICE_DEVICE))[2] == []

        llm.expect(Reply.text("Nice to meet you, Alice."))
        async with SimulatedDevice(ota_url=second.ota_url, device_id=ALICE_DEVICE, mcp=False) as alice:
            await alice.connect()
            await exchange(alice, ALICE)
            # What she says is learnt as she says it (her turn's own instructions carry it already).
            assert "- Name: Alice (" in system(llm.messages(3))
            assert await exchange(alice, "Forget everything about me!") == ASK["en"]
            assert await exchange(alice, "yes") == DONE["en"]
            assert await stored(tmp_path, ALICE_DEVICE) == ([], None, [])
        await asyncio.sleep(1.0)
        assert len(llm.requests) == 4 and (await stored(tmp_path, ALICE_DEVICE))[2] == []
        llm.expect(Reply.text("I do not know your name."))
        async with SimulatedDevice(ota_url=second.ota_url, device_id=ALICE_DEVICE, mcp=False) as alice:
            await alice.connect()
            await exchange(alice, "what is my name")
        assert "What you remember" not in system(llm.messages(4))
        assert conversation(llm.messages(4)) == [("user", "what is my name")]

        llm.expect(Reply.text("你好，爱丽丝。"))
        async with SimulatedDevice(ota_url=second.ota_url, device_id=ZH_DEVICE, mcp=False) as zh:
            await zh.connect()
            await exchange(zh, ZH_ALICE)
            turns, _, facts = await stored(tmp_path, ZH_DEVICE)
            assert turns == [ZH_ALICE] and sorted(facts) == sorted(["爱丽丝", "绿茶"])
            assert (await exchange(zh, "忘掉我说过的话")).replace(" ", "") == ASK["zh"]
            assert (await exchange(zh, "是")).replace(" ", "") == DONE["zh"]
            assert await stored(tmp_path, ZH_DEVICE) == ([], None, [])
        await second.stop()

        third = await serve(tmp_path, llm)
        stack.push_async_callback(third.stop)
        llm.expect(Reply.text("我不知道。"))
        async with SimulatedDevice(ota_url=third.ota_url, device_id=ZH_DEVICE, mcp=False) as zh:
            await zh.connect()
            await exchange(zh, "我叫什么名字")
        await requests(llm, 7, "the Mandarin question")
        assert "爱丽丝" not in system(llm.messages(6))
        assert conversation(llm.messages(6)) == [("user", "我叫什么名字")]
        await third.stop()
        llm.assert_all_consumed()
        assert "Traceback" not in third.text()  # the three share one log file
