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
up to where it was cut off). Writes never hold a turn up: `record` queues the write and returns;
a write the store cannot make (disk full) is logged once by the store and the session goes on.
A turn is recorded several times (its question at once, its reply so far at each sentence, then
as it settled): one write at a time per conversation, and a newer version of a turn replaces the
one still waiting, so a long reply on a slow store costs at most two writes in flight and queued.

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
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.config.memory import MemoryConfig
from vixio.providers.agent.base import mark_interrupted
from vixio.state.store import (
    DeviceMemory,
    Store,
    StoredTurn,
    StoreError,
    StoreWriteError,
)

if TYPE_CHECKING:
    from vixio.memory.long_term import MemoryUpdater
    from vixio.state.fact_learner import FactLearner
    from vixio.state.fact_model import ModelFacts

MAX_TEXT_CHARS = 4000
"""Longest user text or reply stored per turn (longer ones keep their start); bounds what one device can store."""
KEPT_TURN_IDS = 8
"""Recent turns whose reply may still be corrected (an interrupt after the reply streamed)."""
KEPT_SESSION_TURNS = 50
"""A session's latest turns handed to the long-term memory update when it ends."""


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


class Conversation:
    """One device's conversation in one session: the turns restored, and the recorder of new ones."""

    def __init__(
        self,
        store: Store,
        device_id: str,
        restored: list[StoredTurn],
        on_close: Callable[[Conversation], None] | None = None,
    ) -> None:
        self.store = store
        self.device_id = device_id
        self.restored = restored
        """Earlier turns of this conversation (empty for a new one), oldest first."""
        self.memory = ""
        """The device's long-term memory ("" without one): as the session began, or as an operator
        last set it (the instructions read it at every turn)."""
        self.learner: FactLearner | None = None
        """Its facts (`memory.long_term: facts` or `model`), else None."""
        self.budget, self.latest_user = 600, ""
        """At most this many characters of facts in the instructions (`memory.max_chars`), those
        about what the user said last first after identity."""
        self.on_history: Callable[[list[dict[str, Any]]], None] | None = None
        """Called with the history the model should have now, when an operator removed turns."""
        self.session_turns: list[StoredTurn] = []
        """The turns of this session, as last recorded (at most the last `KEPT_SESSION_TURNS`)."""
        self._on_close = on_close
        self.id = restored[-1].conversation if restored else uuid.uuid4().hex[:16]
        self._next_seq = restored[-1].seq + 1 if restored else 0
        self.turns_before = self._next_seq
        """Turns this conversation had before this session (the session's turns are numbered on)."""
        self._turns: dict[int, tuple[int, float]] = {}
        """The session's turn key -> (seq, start time), for the recent turns only."""
        self._erased: dict[int, None] = {}
        """Turn keys an operator erased (the recent ones): a turn still settling when its words were
        erased is not stored again."""
        self._queued: dict[int, StoredTurn] = {}
        """Turns waiting to be written, by seq, oldest first (the newest version of each)."""
        self._writer: asyncio.Task[None] | None = None
        """Writes `_queued` (done once it found nothing left)."""

    def memory_text(self) -> str:
        """The facts and the memory as they are now (instructions call this at every turn)."""
        facts = self.learner.note(self.latest_user, self.budget) if self.learner is not None else ""
        return f"{facts}\n{self.memory}".strip()

    def history_items(self, *, with_session: bool = False) -> list[dict[str, Any]]:
        """The restored turns (and this session's, `with_session`) as agent history: user and
        assistant messages, oldest first."""
        items: list[dict[str, Any]] = []
        for turn in [*self.restored, *(self.session_turns if with_session else [])]:
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
        if key in self._erased:
            return  # said before an operator erased it: its later versions are erased too
        known = self._turns.get(key)
        if known is None:
            known = self._turns[key] = (self._next_seq, time.time())
            self._next_seq += 1
            while len(self._turns) > KEPT_TURN_IDS:
                del self._turns[next(iter(self._turns))]
            if user.strip():
                self.latest_user = user.strip()[:MAX_TEXT_CHARS]
                if self.learner is not None:
                    self.learner.heard(self.id, known[0], self.latest_user, known[1])
        seq, at = known
        turn = StoredTurn(
            self.id, seq, user.strip()[:MAX_TEXT_CHARS], assistant.strip()[:MAX_TEXT_CHARS], interrupted, at
        )
        if self.session_turns and self.session_turns[-1].seq == seq:
            self.session_turns[-1] = turn
        else:
            self.session_turns = [*self.session_turns[-(KEPT_SESSION_TURNS - 1) :], turn]
        self._queued[seq] = turn
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued(), name=f"vixio-memory-{self.device_id}")

    async def _write_queued(self) -> None:
        """Write the queued turns one at a time, in order, until none is left."""
        while self._queued:
            seq = next(iter(self._queued))
            turn = self._queued.pop(seq)
            try:
                await self.store.put_turn(self.device_id, turn)
            except StoreWriteError:
                pass  # the store logged it (once per episode); the conversation goes on
            except StoreError as exc:
                logger.bind(device=self.device_id).warning("turn {} not stored: {}", turn.seq, exc)

    def _drop_writes(self, seqs: set[int] | None = None) -> list[asyncio.Task[None]]:
        """Forget the queued writes (of `seqs`; None: all); the writer still under way, if any,
        whose write in progress may land after an operator's erase."""
        for seq in list(self._queued) if seqs is None else seqs:
            self._queued.pop(seq, None)
        return [self._writer] if self._writer is not None and not self._writer.done() else []

    def _erase_keys(self, keys: list[int]) -> None:
        self._erased.update(dict.fromkeys(keys))
        while len(self._erased) > KEPT_TURN_IDS:
            del self._erased[next(iter(self._erased))]

    def drop_turn(self, conversation: str, seq: int) -> list[asyncio.Task[None]]:
        """An operator deleted this turn from the store: the model forgets it too (this session's
        tool calls go with the rebuilt history). Its queued writes go; returns the writer under way."""
        if conversation != self.id:
            return []
        in_flight = self._drop_writes({seq})
        if self.learner is not None:
            self.learner.drop_turn(seq)
        self._erase_keys([key for key, known in self._turns.items() if known[0] == seq])
        kept = [t for t in self.restored if t.seq != seq]
        session = [t for t in self.session_turns if t.seq != seq]
        if len(kept) + len(session) == len(self.restored) + len(self.session_turns):
            return in_flight
        self.restored, self.session_turns = kept, session
        self._turns = {key: known for key, known in self._turns.items() if known[0] != seq}
        if self.on_history is not None:
            self.on_history(self.history_items(with_session=True))
        return in_flight

    def start_afresh(self, *, keep_memory: bool) -> list[asyncio.Task[None]]:
        """An operator cleared the device's history (and its memory unless `keep_memory`): a new
        conversation begins, the model's history is emptied, the queued writes go; returns the
        writer under way."""
        in_flight = self._drop_writes()
        self._erase_keys(list(self._turns))
        self.restored, self.session_turns, self._turns = [], [], {}
        self.id, self._next_seq = uuid.uuid4().hex[:16], 0
        if not keep_memory:
            self.memory, self.latest_user = "", ""
            if self.learner is not None:
                in_flight += self.learner.forget_all()
        if self.on_history is not None:
            self.on_history([])
        return in_flight

    async def forget(self) -> None:
        """Erase what the store keeps of the device (after the writes under way) and start afresh:
        nothing of this session so far is remembered either."""
        waiting = [self._writer] if self._writer is not None else []
        if self.learner is not None:
            waiting += self.learner.forget_all()
        if waiting:
            await asyncio.gather(*waiting, return_exceptions=True)
        await self.store.forget_device(self.device_id)
        self.restored, self.session_turns, self.memory, self._turns = [], [], "", {}
        self.latest_user = ""
        self.id, self._next_seq = uuid.uuid4().hex[:16], 0

    async def written(self) -> None:
        """Wait for the queued writes, so an erase that follows finds every turn it must erase."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    async def close(self) -> None:
        """Wait for the writes still under way, so a device reconnecting at once finds its turns;
        then the long-term memory is updated (behind)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close(self)


def _last_conversation(turns: list[StoredTurn]) -> list[StoredTurn]:
    """The unbroken run of turns at the end of `turns` that belong to the newest conversation."""
    last = turns[-1].conversation
    start = len(turns)
    while start > 0 and turns[start - 1].conversation == last:
        start -= 1
    return turns[start:]
