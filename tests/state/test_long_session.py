"""A 60-turn session: the name and the tea given at turn 1 are still in what the model is sent at
turn 60, after 30 other likes were learnt (the budget keeps identity first, then what the user
asks about). With the rules alone (`long_term: facts`, the default) and with a scripted model
that extracts by a fixed rule (`long_term: model`), where only the model understands how the tea
was said. The text summary this replaces lost the name after turn 10 of a 200-turn session, and
learnt nothing from turn 0 of a 56-turn one (it saw the last 50 turns)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

from .test_forget import exchange
from .test_long_term import system
from .test_resume import start, url

pytestmark = pytest.mark.integration

TURNS = 60


def extractor(body: dict[str, Any]) -> Reply | None:
    """The fixed rule: agent requests get "OK."; a fact request gets the name, every "I like X"
    and every "X is what I drink" of the user lines it was sent, as JSON."""
    messages = body.get("messages") or []
    if not any("lasting facts" in str(m.get("content")) for m in messages if m.get("role") == "system"):
        return Reply.text("OK.")
    said = "\n".join(line[6:] for line in str(messages[-1]["content"]).splitlines() if line.startswith("User: "))
    facts = [{"kind": "name", "value": name} for name in re.findall(r"my name is (\w+)", said)]
    facts += [
        {"kind": "like", "value": v}
        for v in re.findall(r"(?:I like|^|and) ([a-z ]+?) is what I drink", said, re.MULTILINE)
    ]
    facts += [{"kind": "like", "value": v.strip()} for v in re.findall(r"I like ([a-z0-9 ]+)", said)]
    return Reply.text(json.dumps({"facts": facts}))


@pytest.mark.parametrize(
    ("mode", "first"),
    [
        ("facts", "my name is Alice and I like green tea"),
        ("model", "my name is Alice and green tea is what I drink every day"),
    ],
)
async def test_the_name_and_the_tea_of_turn_1_reach_turn_60(
    llm: ScriptedLLMServer, tmp_path: Path, mode: str, first: str
) -> None:
    llm.rule = extractor
    server = await start(llm, tmp_path, memory={"resume_minutes": 60, "long_term": mode, "max_chars": 400})
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await exchange(device, first)
            for n in range(2, TURNS):
                await exchange(
                    device, f"I like hobby number {n}" if n % 2 else f"tell me something about the number {n}"
                )
            await exchange(device, "what should I drink now, some tea?")
        agent = [body for body in llm.requests if "lasting facts" not in str(body["messages"][0]["content"])]
        assert len(agent) == TURNS
        instructions = system(agent[-1]["messages"])
        assert "- Name: Alice (" in instructions and "- Likes: green tea (" in instructions, instructions
        assert len(instructions.split("earlier conversations")[1]) < 400 + 200  # the budget held
        deadline = time.monotonic() + 10  # facts are written behind the turns

        async def hobbies() -> list[str]:
            return [f.value for f in await server.store.facts(device.device_id) if f.value.startswith("hobby number")]

        while len(await hobbies()) < 29 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(await hobbies()) == 29  # every turn was learnt from
        facts = await server.store.facts(device.device_id)
        if mode == "model":
            assert sum("lasting facts" in str(b["messages"][0]["content"]) for b in llm.requests) >= TURNS // 10
            assert next(f for f in facts if f.value == "green tea").source == "model"
    finally:
        await server.stop()
