"""What a session remembers: its device's conversation, resumed and recorded through the store.

    memory = ConversationMemory(store, config.memory)
    conversation = await memory.resume(device_id)     # the last turns when the device is back soon
    station = AgentStation(..., history=conversation.history_items())
    station.on_turn = conversation.record             # every settled turn, written behind
    ...
    await conversation.close()                        # the session ends: pending writes land

A device that reconnects within `memory.resume_minutes` of its last turn continues that
conversation (at most `memory.max_turns` turns, as the user heard them: an interrupted reply only
up to where it was cut off). Writes never hold a turn up: `record` queues the write and returns;
a write the store cannot make (disk full) is logged once by the store and the session goes on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from loguru import logger

from vixio.config.memory import MemoryConfig
from vixio.providers.agent.base import mark_interrupted
from vixio.state.store import Store, StoredTurn, StoreError, StoreWriteError

MAX_TEXT_CHARS = 4000
"""Longest user text or reply stored per turn (longer ones keep their start); bounds what one device can store."""
KEPT_TURN_IDS = 8
"""Recent turns whose reply may still be corrected (an interrupt after the reply streamed)."""


class ConversationMemory:
    """One per process: opens each new session's conversation."""

    def __init__(self, store: Store, config: MemoryConfig) -> None:
        self.store = store
        self.config = config

    async def resume(self, device_id: str) -> Conversation:
        """The device's last conversation when its last turn is recent enough, else a new one.
        A store that cannot be read gives a new conversation (and one WARNING), not a failed session."""
        turns: list[StoredTurn] = []
        window = self.config.resume_minutes * 60
        if window > 0:
            try:
                recent = await self.store.recent_turns(device_id, self.config.max_turns)
            except StoreError as exc:
                logger.bind(device=device_id).warning("the conversation starts afresh: {}", exc)
                recent = []
            if recent and recent[-1].at >= time.time() - window:
                turns = _last_conversation(recent)
        conversation = Conversation(self.store, device_id, turns)
        if turns:
            logger.bind(device=device_id).info("resuming conversation {}: {} earlier turn(s)", conversation.id, len(turns))
        return conversation


class Conversation:
    """One device's conversation in one session: the turns restored, and the recorder of new ones."""

    def __init__(self, store: Store, device_id: str, restored: list[StoredTurn]) -> None:
        self.store = store
        self.device_id = device_id
        self.restored = restored
        """Earlier turns of this conversation (empty for a new one), oldest first."""
        self.id = restored[-1].conversation if restored else uuid.uuid4().hex[:16]
        self._next_seq = restored[-1].seq + 1 if restored else 0
        self._turns: dict[int, tuple[int, float]] = {}
        """The session's turn key -> (seq, start time), for the recent turns only."""
        self._writes: set[asyncio.Task[None]] = set()

    def history_items(self) -> list[dict[str, Any]]:
        """The restored turns as agent history: user and assistant messages, oldest first."""
        items: list[dict[str, Any]] = []
        for turn in self.restored:
            if turn.user:
                items.append({"role": "user", "content": turn.user})
            if turn.interrupted:
                items.append({"role": "assistant", "content": mark_interrupted(turn.assistant)})
            elif turn.assistant:
                items.append({"role": "assistant", "content": turn.assistant})
        return items

    def record(self, key: int, user: str, assistant: str, interrupted: bool) -> None:
        """Store a settled turn; the same `key` again replaces it (its reply was cut off later).
        Returns at once: the write happens behind."""
        known = self._turns.get(key)
        if known is None:
            known = self._turns[key] = (self._next_seq, time.time())
            self._next_seq += 1
            while len(self._turns) > KEPT_TURN_IDS:
                del self._turns[next(iter(self._turns))]
        seq, at = known
        turn = StoredTurn(self.id, seq, user[:MAX_TEXT_CHARS], assistant[:MAX_TEXT_CHARS], interrupted, at)
        # Tasks start in creation order and each queues its write on its first step, so two writes
        # of one turn reach the store in order.
        task = asyncio.create_task(self._put(turn), name=f"vixio-memory-{self.device_id}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _put(self, turn: StoredTurn) -> None:
        try:
            await self.store.put_turn(self.device_id, turn)
        except StoreWriteError:
            pass  # the store logged it (once per episode); the conversation goes on
        except StoreError as exc:
            logger.bind(device=self.device_id).warning("turn {} not stored: {}", turn.seq, exc)

    async def close(self) -> None:
        """Wait for the writes still under way, so a device reconnecting at once finds its turns."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)


def _last_conversation(turns: list[StoredTurn]) -> list[StoredTurn]:
    """The unbroken run of turns at the end of `turns` that belong to the newest conversation."""
    last = turns[-1].conversation
    start = len(turns)
    while start > 0 and turns[start - 1].conversation == last:
        start -= 1
    return turns[start:]


async def prune_history_forever(store: Store, config: MemoryConfig, every: float = 3600.0) -> None:
    """Delete turns older than `memory.history_days`, now and every `every` seconds (run as a task)."""
    while True:
        try:
            removed = await store.prune_history(time.time() - config.history_days * 86400)
            if removed:
                logger.info("state store: {} turn(s) older than {:g} days deleted", removed, config.history_days)
        except StoreError as exc:
            logger.warning("state store: old turns not deleted this time: {}", exc)
        await asyncio.sleep(every)
