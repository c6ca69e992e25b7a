"""What a session records of its turns (AgentStation.on_turn into a Conversation) and what the
next session's agent starts from: the turns as the user heard them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vixio.config.memory import MemoryConfig
from vixio.core.chunk import TextChunk
from vixio.core.pipeline import Pipeline
from vixio.memory.conversation import ConversationMemory
from vixio.memory.recording import Conversation
from vixio.state.store import Store, StoredTurn
from vixio.stations import AgentStation

from ..stations.fakes import ScriptedAgent

pytestmark = pytest.mark.integration

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
        (0, "weather in Paris?", "Paris is sunny.", False),
        (1, "count to eight", "one two", True),
    ]

    resumed = await memory.resume(DEVICE)
    assert resumed.history_items() == [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "Paris is sunny."},
        {"role": "user", "content": "count to eight"},
        {"role": "assistant", "content": "one two… [interrupted by the user]"},
    ]
    next_agent = ScriptedAgent("You asked me to count.")
    station = AgentStation(next_agent, history=resumed.history_items())
    async with Pipeline([station], session_id="s2"):
        pass
    assert next_agent.history == resumed.history_items()  # restored at start


async def test_a_turn_in_progress_is_stored_as_it_goes(store: Store) -> None:
    # What a worker killed mid-reply leaves behind: the question at once, then the sentences the
    # device was given, marked interrupted until the turn settles.
    memory = ConversationMemory(store, MemoryConfig())
    conversation = await memory.resume(DEVICE)
    agent = ScriptedAgent("one two three four five six seven eight nine ten", delay=0.1)
    station = AgentStation(agent)
    station.on_turn = conversation.record
    pipeline = Pipeline([station], session_id="s1")

    async def stored() -> tuple[str, str, bool]:
        for _ in range(100):
            turns = await store.recent_turns(DEVICE, limit=10)
            if turns:
                return turns[-1].user, turns[-1].assistant, turns[-1].interrupted
            await asyncio.sleep(0.01)
        raise AssertionError("no turn stored")

    async def stored_as(expected: tuple[str, str, bool]) -> None:
        for _ in range(100):
            if await stored() == expected:
                return
            await asyncio.sleep(0.01)
        assert await stored() == expected

    async with pipeline:
        await pipeline.push(TextChunk(text="count to ten", role="user"))
        await stored_as(("count to ten", "", True))
        pipeline.state.hear("one two")  # the downlink gave the device a sentence
        await stored_as(("count to ten", "one two", True))
        pipeline.state.hear("three four")
        await stored_as(("count to ten", "one two three four", True))
        assert station._generating  # all of it while the model was still answering
        for _ in range(300):
            if not station._generating:
                break
            await asyncio.sleep(0.01)
        pipeline.state.hear("five six")  # still playing after the turn settled: nothing more to store
        await conversation.close()
    assert await stored() == ("count to ten", "one two three four five six seven eight nine ten", False)
    assert len(await store.recent_turns(DEVICE, limit=10)) == 1


class SlowWrites:
    """The store, each turn's write taking 50 ms (a busy disk); counts the writes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes: list[StoredTurn] = []

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        self.writes.append(turn)
        await asyncio.sleep(0.05)
        await self.store.put_turn(device_id, turn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class GatedWrites:
    """The store behind a disk the test turns by hand: each turn's write waits until the test lets
    one finish (no clock, so the count does not depend on how busy the machine is); counts them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes: list[StoredTurn] = []
        self._finished = asyncio.Semaphore(0)

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        self.writes.append(turn)
        await self._finished.acquire()
        await self.store.put_turn(device_id, turn)

    def finish_one(self) -> None:
        self._finished.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_turn_recorded_sentence_by_sentence_costs_a_bounded_number_of_writes(store: Store) -> None:
    gated = GatedWrites(store)
    conversation = Conversation(gated, DEVICE, [])  # type: ignore[arg-type]
    reply = ""
    for n in range(50):  # a long reply heard faster than the store writes: one write ends per 10 sentences
        reply += f"sentence {n}. "
        conversation.record(1, "tell me a story", reply, True)
        await asyncio.sleep(0)  # the writer runs between two sentences, as it would between two frames
        if n % 10 == 9:
            gated.finish_one()
    conversation.record(1, "tell me a story", reply, False)
    conversation.record(2, "and another", "", True)
    for _ in range(52):  # the disk catches up (permits nobody takes are harmless)
        gated.finish_one()
    await conversation.close()
    # Each write takes the newest version queued: 1 + one per finished write (5) + the two settled turns.
    assert len(gated.writes) <= 8, [t.assistant[-12:] for t in gated.writes]
    assert gated.writes[0].assistant == "sentence 0." and [t.seq for t in gated.writes].count(1) == 1
    turns = await store.recent_turns(DEVICE, limit=10)
    assert [(t.seq, t.user, t.assistant, t.interrupted) for t in turns] == [
        (0, "tell me a story", reply.strip(), False),
        (1, "and another", "", True),
    ]


async def test_an_operators_erase_is_not_undone_by_a_write_under_way(store: Store) -> None:
    # The console erases in the store, then tells the live conversations: a version of a turn
    # being written (or queued) at that moment must not bring the words back.
    slow = SlowWrites(store)
    memory = ConversationMemory(slow, MemoryConfig())  # type: ignore[arg-type]
    conversation = await memory.resume(DEVICE)
    for key, what in enumerate(("forget", "history", "turn")):
        conversation.record(key, "the alarm code is 4711", "", True)  # the question, at once
        conversation.record(key, "the alarm code is 4711", "Noted.", False)  # settled: queued behind it
        await asyncio.sleep(0.01)  # the first write is under way
        seq = conversation.session_turns[-1].seq
        if what == "forget":
            await store.forget_device(DEVICE)
        elif what == "history":
            await store.clear_history(DEVICE)
        else:
            await store.delete_turn(DEVICE, conversation.id, seq)
        assert await memory.changed(DEVICE, what, conversation.id, seq) == 1
        conversation.record(key, "the alarm code is 4711", "Noted.", False)  # the turn settles after the erase
        await asyncio.sleep(0.15)  # every write that was coming has come
        assert [t.user for t in await store.recent_turns(DEVICE, limit=10)] == [], what
        assert [t.user for t in conversation.session_turns] == [], what
    await conversation.close()
