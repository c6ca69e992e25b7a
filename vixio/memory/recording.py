"""One device's conversation in one session: the turns it resumed, and the recorder of new ones.

    conversation = await memory.resume(device_id)     # vixio/memory/conversation.py
    station.on_turn = conversation.record             # every settled turn, written behind

Writes never hold a turn up: `record` queues the write and returns; a write the store cannot make
(disk full) is logged once by the store and the session goes on. A turn is recorded several times
(its question at once, its reply so far at each sentence, then as it settled): one write at a time
per conversation, and a newer version of a turn replaces the one still waiting, so a long reply on
a slow store costs at most two writes in flight and queued. Texts are cut to `MAX_TEXT_CHARS`,
which bounds what one device can store.

An operator's erase reaches a live conversation here (`drop_turn`, `start_afresh`, `forget`): the
model's history loses the turns at once, the queued writes go, and a turn still settling when its
words were erased is not stored again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.providers.agent.base import mark_interrupted
from vixio.state.store import Store, StoredTurn, StoreError, StoreWriteError

if TYPE_CHECKING:
    from vixio.state.fact_learner import FactLearner

MAX_TEXT_CHARS = 4000
"""Longest user text or reply stored per turn (longer ones keep their start); bounds what one device can store."""
KEPT_TURN_IDS = 8
"""Recent turns whose reply may still be corrected (an interrupt after the reply streamed)."""
KEPT_SESSION_TURNS = 50
"""A session's latest turns handed to the long-term memory update when it ends."""


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
