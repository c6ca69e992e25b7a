"""A fact deleted by voice, by the console's route and by `vixio memory forget-fact` is in no file
of the SQLite store immediately after (state.db, -wal and -shm read as bytes), the turns that
said it with it; negated requests erase nothing; a Mandarin request on an English device is
understood; "what do you remember about me" lists the facts. A real server, a simulated device,
the scripted model; the same on Redis (where files are not read: docs/privacy.md#redis)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from vixio.memory.forget import ASK, FORGOT_FACT, KEPT
from vixio.state.store import Store
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

from .erased import assert_in_no_file, occurrences
from .test_forget import exchange
from .test_memory_cli import _main
from .test_resume import start, url

pytestmark = pytest.mark.integration

NEGATED = (
    "please don't forget what I told you",
    "不要忘记我说的话",
    "Never forget that I like green tea",
    "别忘了我喜欢绿茶",
)


async def until_facts(store: Store, device_id: str, values: set[str], timeout: float = 10.0) -> None:
    """The facts are written behind the turns: wait (bounded) until `values` are all stored."""
    deadline = time.monotonic() + timeout
    while not values <= (stored := {f.value for f in await store.facts(device_id)}):
        assert time.monotonic() < deadline, f"{values - stored} never stored (stored: {stored})"
        await asyncio.sleep(0.05)


async def test_facts_forgotten_by_voice_and_cli_leave_no_trace(
    llm: ScriptedLLMServer, tmp_path: Path, state_config: dict[str, Any]
) -> None:
    llm.expect(*[Reply.text("Noted.")] * (3 + len(NEGATED)))
    server = await start(llm, tmp_path, state=state_config)  # an English device (language: en)
    store = server.store
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await exchange(device, "My name is Alice and I like green tea")
            await exchange(device, "I live in Springfield and my sister is called Marigold")
            await exchange(device, "我喜欢乌龙茶")
            if store.location.endswith(".db"):  # the words are on disk before: the check below can fail
                deadline = time.monotonic() + 10.0  # written behind the turn: bounded wait, not a sleep
                while sum(occurrences(store, "green tea").values()) == 0:
                    assert time.monotonic() < deadline, "the words never reached the disk"
                    await asyncio.sleep(0.05)
            for negated in NEGATED:  # answered by the model; nothing erased
                await exchange(device, negated)
            assert ASK["en"] not in str(device.received)
            await until_facts(
                store, device.device_id, {"Alice", "green tea", "Springfield", "sister Marigold", "乌龙茶"}
            )

            recalled = await exchange(device, "What do you remember about me?")
            assert "your name is Alice" in recalled and "you like green tea" in recalled, recalled
            assert "你叫Alice" in (await exchange(device, "你记得我什么")).replace(" ", "")

            reply = await exchange(device, "Forget that I like green tea, please.")
            assert reply == FORGOT_FACT["en"].format("green tea"), reply
            assert "green tea" not in {f.value for f in await store.facts(device.device_id)}
            await assert_in_no_file(store, "green tea")
            assert "My name is Alice" not in [t.user for t in await store.recent_turns(device.device_id, 50)]

            reply = (await exchange(device, "忘掉我喜欢乌龙茶")).replace(" ", "")  # Mandarin on an English device
            assert reply == FORGOT_FACT["zh"].format("乌龙茶"), reply
            await assert_in_no_file(store, "乌龙茶")
            assert await exchange(device, "clear your memory") == ASK["en"]
            assert await exchange(device, "no") == KEPT["en"]
        assert len(llm.requests) == 3 + len(NEGATED)  # the requests never reached the model

        config = tmp_path / "config.yaml"
        config.write_text(json.dumps({"state": state_config}), encoding="utf-8")
        assert await _main(["memory", "facts", device.device_id, "--config", str(config), "--json"]) == 0
        assert await _main(["memory", "forget-fact", device.device_id, "Marigold", "--config", str(config)]) == 0
        assert await _main(["memory", "forget-fact", device.device_id, "home", "--config", str(config)]) == 0
        assert await _main(["memory", "forget-fact", device.device_id, "nothing", "--config", str(config)]) == 1
        # "别忘了我喜欢绿茶" (don't forget I like green tea) was learnt, as it should be.
        assert sorted(f.value for f in await store.facts(device.device_id)) == ["Alice", "绿茶"]
        for words in ("Marigold", "Springfield"):
            await assert_in_no_file(store, words)
    finally:
        await server.stop()
