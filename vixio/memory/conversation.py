"""What a session remembers: its device's conversation, resumed and recorded through the store.

    memory = ConversationMemory(store, config.memory)
    conversation = await memory.resume(device_id)     # the last turns when the device is back soon
    station = AgentStation(..., history=conversation.history_items())
    station.on_turn = conversation.record             # every settled turn, written behind
    ...
    await conversation.close()                        # the session ends: pending writes land,
                                                      # then the long-term memory is updated

A device that reconnects within `memory.resume_minutes` of its last turn continues that
conversation (at most `memory.max_turns` turns, as the user heard them: an interrupted reply only
up to where it was cut off). How a session's turns are recorded, written behind and erased while
it talks: vixio/memory/recording.py (`Conversation`).

An operator's edit in the store (the console) reaches the device's live conversations through
`ConversationMemory.changed`: an edited memory is in the instructions from the next turn on, a
deleted turn or a cleared history leaves the model's history at once. The long-term update at a
conversation's end learns only from the turns the store still holds, so an erasure made by another
process (`vixio memory clear` while the device talks) is not undone when the session ends.

Facts (`memory.long_term: facts` or `model`) are learnt from every utterance as it is recorded
(vixio/state/fact_learner.py); the instructions carry them, identity first, then those about
what the user just said, within `memory.max_chars`, followed by an operator's memory text.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.config.memory import MemoryConfig
from vixio.memory.recording import KEPT_SESSION_TURNS, Conversation
from vixio.state.store import (
    DeviceMemory,
    Store,
    StoredTurn,
    StoreError,
    StoreWriteError,
)

if TYPE_CHECKING:
    from vixio.memory.long_term import MemoryUpdater
    from vixio.state.fact_model import ModelFacts

__all__ = ["ConversationMemory"]

LATE_WRITE_WAIT = 5.0
"""Seconds an operator's erase waits for a live conversation's write under way before erasing again."""


class ConversationMemory:
    """One per process: opens each new session's conversation, and updates the device's long-term
    memory with `updater` when a conversation ends (vixio/memory/long_term.py)."""

    def __init__(
        self,
        store: Store,
        config: MemoryConfig,
        updater: MemoryUpdater | None = None,
        facts_model: ModelFacts | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.updater = updater
        self.facts_model = facts_model
        """The cloud model that extracts facts (`long_term: model`); None: the rules alone."""
        self.learns = config.long_term in ("facts", "model")
        self.reads_memory = config.long_term != "off"
        self._updates: set[asyncio.Task[None]] = set()
        self._live: dict[str, set[Conversation]] = {}
        """The conversations of this process's live sessions, by device."""

    async def resume(self, device_id: str) -> Conversation:
        """The device's last conversation when its last turn is recent enough, else a new one.
        A store that cannot be read gives a new conversation (and one WARNING), not a failed session."""
        turns: list[StoredTurn] = []
        window = self.config.resume_minutes * 60
        # Both reads at once: one round trip on Redis (calls made together share a pipeline).
        recent_read, memory_read, facts_read = await asyncio.gather(
            self.store.recent_turns(device_id, self.config.max_turns) if window > 0 else asyncio.sleep(0),
            self.store.memory(device_id) if self.reads_memory else asyncio.sleep(0),
            self.store.facts(device_id) if self.learns else asyncio.sleep(0),
            return_exceptions=True,
        )
        if isinstance(recent_read, StoreError):
            logger.bind(device=device_id).warning("the conversation starts afresh: {}", recent_read)
        elif isinstance(recent_read, BaseException):
            raise recent_read
        elif recent_read and recent_read[-1].at >= time.time() - window:
            turns = _last_conversation(recent_read)
        conversation = Conversation(self.store, device_id, turns, on_close=self._ended)
        conversation.budget = self.config.max_chars
        self._live.setdefault(device_id, set()).add(conversation)
        if self.learns:
            from vixio.state.fact_learner import FactLearner

            if isinstance(facts_read, BaseException) and not isinstance(facts_read, StoreError):
                raise facts_read
            if isinstance(facts_read, StoreError):
                logger.bind(device=device_id).warning("facts not read: {}", facts_read)
            known = facts_read if isinstance(facts_read, list) else []
            conversation.learner = FactLearner(self.store, device_id, known, model=self.facts_model)
        if self.reads_memory:
            if isinstance(memory_read, StoreError):
                logger.bind(device=device_id).warning("long-term memory not read: {}", memory_read)
            elif isinstance(memory_read, BaseException):
                raise memory_read
            conversation.memory = memory_read.text if isinstance(memory_read, DeviceMemory) else ""
        if turns:
            logger.bind(device=device_id).info(
                "resuming conversation {}: {} earlier turn(s)", conversation.id, len(turns)
            )
        return conversation

    async def changed(self, device_id: str, what: str, conversation: str = "", seq: int = -1) -> int:
        """An operator changed the device's record in the store: bring its live conversations in
        this process along; how many there were. `what`: "memory" (read it again), "turn"
        (`conversation` and `seq` were deleted), "history" (cleared), "facts" (read them again) or
        "forget" (all of it)."""
        live = list(self._live.get(device_id, ()))
        if what not in ("memory", "turn", "history", "forget", "facts"):
            raise ValueError(f"what must be memory, turn, history, facts or forget, not {what!r}")
        if what == "memory" and not self.reads_memory:  # memory.long_term: off reads no memory
            return 0
        if what == "facts":
            for each in live:
                if each.learner is not None:
                    await each.learner.reload()
            return len(live)
        text = ""
        if live and what == "memory":
            remembered = await self.store.memory(device_id)
            text = remembered.text if remembered is not None else ""
        in_flight: list[asyncio.Task[None]] = []
        for each in live:
            if what == "memory":
                each.memory = text
            elif what == "turn":
                in_flight += each.drop_turn(conversation, seq)
            else:
                in_flight += each.start_afresh(keep_memory=what == "history")
        if live and what != "memory":
            # A live conversation's write queued before this call may have landed after the
            # operator's erase (the console erases, then tells us): erase again once the writes
            # under way are done (each erase is idempotent), so nothing said comes back.
            if in_flight:
                await asyncio.wait(in_flight, timeout=LATE_WRITE_WAIT)
            try:
                if what == "turn":
                    await self.store.delete_turn(device_id, conversation, seq)
                elif what == "history":
                    await self.store.clear_history(device_id)
                else:
                    await self.store.forget_device(device_id)
            except StoreError as exc:
                logger.bind(device=device_id).warning(
                    "the {} erase could not be repeated after a late write: {}", what, exc
                )
        if live:
            logger.bind(device=device_id).info(
                "an operator changed the stored {}: {} live conversation(s) follow", what, len(live)
            )
        return len(live)

    def _ended(self, conversation: Conversation) -> None:
        conversations = self._live.get(conversation.device_id)
        if conversations is not None:
            conversations.discard(conversation)
            if not conversations:
                del self._live[conversation.device_id]
        learner = conversation.learner
        if learner is not None and learner.busy:  # the model's last batch, the last writes
            self._spawn(learner.finish(), f"vixio-facts-finish-{conversation.device_id}")
        if self.updater is None or not conversation.session_turns:
            return
        self._spawn(self._update(conversation), f"vixio-memory-update-{conversation.device_id}")

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._updates.add(task)
        task.add_done_callback(self._updates.discard)

    async def _update(self, conversation: Conversation) -> None:
        assert self.updater is not None
        log = logger.bind(device=conversation.device_id)
        try:
            # Together (one round trip on Redis); the memory as now: another session may have changed it.
            turns, current = await asyncio.gather(
                self._still_stored(conversation), self.store.memory(conversation.device_id)
            )
            if not turns:
                log.info("long-term memory not updated: the conversation's turns were erased meanwhile")
                return
            text = await self.updater.update(current.text if current is not None else "", turns)
            # The model may take seconds: an erasure or an edit made meanwhile wins over this update.
            after, now = await asyncio.gather(
                self._still_stored(conversation), self.store.memory(conversation.device_id)
            )
            if after != turns or now != current:
                log.info("long-term memory not updated: the device's record changed while it was written")
                return
            await self.store.set_memory(conversation.device_id, text)
        except StoreWriteError:
            return  # the store logged it
        except Exception as exc:  # noqa: BLE001 - a model or store failure keeps the old memory
            log.warning("long-term memory not updated: {}: {}", type(exc).__name__, str(exc)[:200])
            return
        log.info("long-term memory updated ({} characters)", len(text))

    async def _still_stored(self, conversation: Conversation) -> list[StoredTurn]:
        """The session's turns the store still holds: what another process erased meanwhile
        (`vixio memory clear`, a worker's console, a deleted turn) is not learnt again."""
        session = conversation.session_turns
        stored = await self.store.recent_turns(conversation.device_id, limit=len(session) + KEPT_SESSION_TURNS)
        kept = {(turn.conversation, turn.seq) for turn in stored}
        return [turn for turn in session if (turn.conversation, turn.seq) in kept]

    async def close(self, timeout: float = 10.0) -> None:
        """Wait (bounded) for memory updates under way: the server is stopping."""
        if self._updates:
            _, pending = await asyncio.wait(set(self._updates), timeout=timeout)
            for task in pending:
                task.cancel()


def _last_conversation(turns: list[StoredTurn]) -> list[StoredTurn]:
    """The unbroken run of turns at the end of `turns` that belong to the newest conversation."""
    last = turns[-1].conversation
    start = len(turns)
    while start > 0 and turns[start - 1].conversation == last:
        start -= 1
    return turns[start:]
