"""'Forget everything about me', then 'yes': a real server, a simulated device, the scripted model.
The exchange never reaches the model; after it the store keeps nothing of the device and the
model's history is empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vixio.memory.forget import ASK, DONE, KEPT, asks_to_forget
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

from .test_long_term import system
from .test_resume import ALICE, conversation, start, url

pytestmark = pytest.mark.process


async def exchange(device: SimulatedDevice, text: str) -> str:
    """What the device was told in reply to `text`, every sentence of it."""
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=15)
    return " ".join(
        str(m.data["text"])
        for m in device.received[mark:]
        if m.data.get("type") == "tts" and m.data.get("state") == "sentence_start"
    )


async def test_forget_after_a_confirmation_erases_the_store_and_the_models_history(
    llm: ScriptedLLMServer, tmp_path: Path, state_config: dict[str, Any]
) -> None:
    llm.expect(
        Reply.text("Nice to meet you, Alice."),
        Reply.text("Nice to meet you, Alice."),
        Reply.text("I do not know your name."),
    )
    server = await start(llm, tmp_path, state=state_config)
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await exchange(device, ALICE)
            assert await exchange(device, "Forget what I told you, please.") == ASK["en"]
            assert await exchange(device, "no") == KEPT["en"]
            assert len(llm.requests) == 1  # neither reached the model
            await exchange(device, ALICE)
            assert conversation(llm.messages(1))[:2] == [("user", ALICE), ("assistant", "Nice to meet you, Alice.")]
            assert await exchange(device, "Forget everything about me!") == ASK["en"]
            assert await exchange(device, "yes") == DONE["en"]
            assert await server.store.recent_turns(device.device_id, limit=10) == []
            assert await server.store.memory(device.device_id) is None
            await exchange(device, "what is my name")
        assert conversation(llm.messages(2)) == [("user", "what is my name")]
        assert "What you remember" not in system(llm.messages(2))
        assert [t.user for t in await server.store.recent_turns(device.device_id, limit=10)] == ["what is my name"]
    finally:
        await server.stop()


def test_the_request_is_recognised_in_both_languages_and_not_elsewhere() -> None:
    assert asks_to_forget("Please, FORGET everything about me.", "en")
    assert asks_to_forget("忘掉我说过的话。", "zh") and asks_to_forget("请 忘掉 我说过的话", "zh")
    assert not asks_to_forget("don't forget the milk", "en") and not asks_to_forget("我说过的话", "zh")
