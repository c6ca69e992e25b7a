"""What a session records of its turns (AgentStation.on_turn into a Conversation) and what the
next session's agent starts from: the turns as the user heard them."""

from __future__ import annotations

import asyncio

from vixio.config.memory import MemoryConfig
from vixio.core.chunk import TextChunk
from vixio.core.pipeline import Pipeline
from vixio.stations import AgentStation
from vixio.state.memory import ConversationMemory
from vixio.state.store import Store

from ..stations.fakes import ScriptedAgent

DEVICE = "aa:bb:cc:dd:ee:ff"


async def test_an_interrupted_reply_is_stored_and_restored_as_heard(store: Store) -> None:
    memory = ConversationMemory(store, MemoryConfig())
    conversation = await memory.resume(DEVICE)
    agent = ScriptedAgent("Paris is sunny.", "one two three four five six seven eight", delay=0.05)
    station = AgentStation(agent, history=conversation.history_items())
    station.on_turn = conversation.record
    pipeline = Pipeline([station], session_id="s1")
    async with pipeline:
        await pipeline.push(TextChunk(text="weather in Paris?", role="user"))
        for _ in range(100):
            if len(agent.asked) == 1 and not station._generating:
                break
            await asyncio.sleep(0.02)
        await pipeline.push(TextChunk(text="count to eight", role="user"))
        await asyncio.sleep(0.15)
        pipeline.state.heard[:] = ["one two"]  # what had reached the device
        await pipeline.interrupt("abort")
    await conversation.close()
    turns = await store.recent_turns(DEVICE, limit=10)
    assert [(t.seq, t.user, t.assistant, t.interrupted) for t in turns] == [
        (0, "weather in Paris?", "Paris is sunny.", False), (1, "count to eight", "one two", True)]

    resumed = await memory.resume(DEVICE)
    assert resumed.history_items() == [
        {"role": "user", "content": "weather in Paris?"}, {"role": "assistant", "content": "Paris is sunny."},
        {"role": "user", "content": "count to eight"},
        {"role": "assistant", "content": "one two… [interrupted by the user]"}]
    next_agent = ScriptedAgent("You asked me to count.")
    station = AgentStation(next_agent, history=resumed.history_items())
    async with Pipeline([station], session_id="s2"):
        pass
    assert next_agent.history == resumed.history_items()  # restored at start
