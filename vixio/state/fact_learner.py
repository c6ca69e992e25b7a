"""One conversation's facts: learnt from each utterance as it is said, written behind, read back
into the instructions at every turn.

    learner = FactLearner(store, device_id, known_facts, model=ModelFacts(...) or None)
    learner.heard(seq, "my name is Alice", at)   # the rules at once; the model every MODEL_EVERY utterances
    learner.note("what should I drink", budget)  # what the instructions carry now
    await learner.finish()                       # the conversation ended: the model's last batch

Every utterance is learnt from, whatever the conversation's length: the rules run on each as it
is recorded (microseconds), and with a model the utterances go to it in batches of
`MODEL_EVERY` during the conversation and the rest when it ends. (The text summary this
replaces saw only a session's last 50 turns, so a name given at turn 0 of a 56-turn session was
never learnt.) Writes are queued, one at a time, in the order they were merged. An erase
(`forget_all`) drops what is queued, and a model answer that arrives after it is thrown away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from loguru import logger

from vixio.state.fact_merge import apply, facts_note, matches, merge, words
from vixio.state.fact_model import ModelFacts
from vixio.state.fact_rules import Finding, extract
from vixio.state.facts import Fact, FactKey
from vixio.state.store import Store, StoreError, StoreWriteError

MODEL_EVERY = 10
"""User utterances sent to the model together (one call per this many, and one at the end)."""
KEPT_TURNS_LOOKED_AT = 200
"""Latest stored turns searched for a batch's turns once the model answered."""


class FactLearner:
    """The facts of one device's conversation (see the module docstring)."""

    def __init__(self, store: Store, device_id: str, known: Sequence[Fact], *, model: ModelFacts | None = None) -> None:
        self.store = store
        self.device_id = device_id
        self.facts: list[Fact] = list(known)
        """What the store holds of the device's facts, as this conversation last merged or read them."""
        self.model = model
        self.person = ""
        """Whose utterances these are ("" the household) when no `person_source` says it per turn."""
        self.person_source: Callable[[], str] | None = None
        """The recognised speaker of the current turn (the session's `SessionState.person`), when
        speaker identification runs: what they say becomes their facts, and they are sent their own
        facts and the household's, never another person's."""
        self._pending: list[tuple[int, str, str, float]] = []
        """(seq, person, text, at) said since the model's last batch."""
        self.conversation = ""
        """The conversation the pending utterances belong to (their turns are looked for in the store)."""
        self._queued: list[tuple[list[Fact], list[FactKey]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._epoch = 0
        """Moves on at every erase: a model answer for an earlier epoch is thrown away."""
        self._asking: set[asyncio.Task[None]] = set()

    # --- learning ----------------------------------------------------------------------------------

    def heard(self, conversation: str, seq: int, text: str, at: float) -> None:
        """The user said `text` (turn `seq` of `conversation`, begun at unix time `at`): learn from it."""
        if not text.strip():
            return
        if conversation != self.conversation:
            self.conversation, self._pending = conversation, []
        person = self.current_person
        self._learn(extract(text), at, "rules", person)
        if self.model is not None:
            self._pending.append((seq, person, text, at))
            if len(self._pending) >= MODEL_EVERY:
                self._ask_model()

    def _learn(self, findings: Sequence[Finding], at: float, source: str, person: str) -> None:
        if not findings:
            return
        puts, drops = merge(self.facts, findings, self.device_id, person=person, at=at, source=source)
        if not puts and not drops:
            return
        self.facts = apply(self.facts, puts, drops)
        self._queued.append((puts, drops))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name=f"vixio-facts-{self.device_id}")

    async def _write(self) -> None:
        while self._queued:
            # Everything queued meanwhile goes in one write (in order: a later put or drop wins),
            # so a slow store (each write truncates the WAL) never falls turns behind.
            merged: dict[FactKey, Fact] = {}
            dropped: dict[FactKey, None] = {}
            for puts, drops in self._queued:
                for owner in drops:
                    merged.pop(owner, None)
                    dropped[owner] = None
                for fact in puts:
                    merged[fact.owner] = fact
                    dropped.pop(fact.owner, None)
            self._queued.clear()
            try:
                await self.store.put_facts(self.device_id, list(merged.values()), list(dropped))
            except StoreWriteError:
                pass  # the store logged it once
            except StoreError as exc:
                logger.bind(device=self.device_id).warning("facts not stored: {}", exc)

    def _ask_model(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.create_task(self._model_batch(batch, self._epoch), name=f"vixio-facts-model-{self.device_id}")
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    async def _model_batch(self, batch: list[tuple[int, str, str, float]], epoch: int) -> None:
        assert self.model is not None
        conversation = self.conversation
        for person in dict.fromkeys(entry[1] for entry in batch):
            mine = [entry for entry in batch if entry[1] == person]
            findings = await self.model.extract(
                [f for f in self.facts if f.person == person], [entry[2] for entry in mine]
            )
            if not findings or epoch != self._epoch:
                continue
            # The model may take seconds: what another process erased meanwhile (`vixio memory
            # clear`, a deleted turn) is not learnt again: only what the stored turns still say counts.
            still = await self._still_said(conversation, {entry[0] for entry in mine})
            kept = [f for f in findings if f.retract or words(f.value) <= words(" ".join(still))]
            if kept and epoch == self._epoch:  # the batch's latest utterance dates what it found
                self._learn(kept, max(entry[3] for entry in mine), "model", person)

    async def _still_said(self, conversation: str, seqs: set[int]) -> list[str]:
        try:
            stored = await self.store.recent_turns(self.device_id, limit=KEPT_TURNS_LOOKED_AT)
        except StoreError:
            return []
        return [turn.user for turn in stored if turn.conversation == conversation and turn.seq in seqs]

    async def finish(self, timeout: float = 90.0) -> None:
        """The conversation ended: the model's last batch, then every queued write (bounded)."""
        if self.model is not None and self._pending:
            self._ask_model()
        waiting = [*self._asking, *([self._writer] if self._writer is not None else [])]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout)
        if self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer], timeout=timeout)

    @property
    def busy(self) -> bool:
        """Whether something is still to be learnt or written (a model batch, a write)."""
        return bool(self._pending or self._asking or (self._writer is not None and not self._writer.done()))

    # --- reading -----------------------------------------------------------------------------------

    @property
    def current_person(self) -> str:
        """Who is speaking now, as the memory's owner key ("" the household, an unknown voice)."""
        return self.person_source() if self.person_source is not None else self.person

    def note(self, query: str, budget: int) -> str:
        """The facts for the instructions now (identity first, then what `query` is about): the
        speaker's own and the household's."""
        person = self.current_person
        return facts_note([fact for fact in self.facts if fact.person in ("", person)], budget, query)

    def matching(self, topic: str) -> list[Fact]:
        """The facts `topic` names ("green tea" -> likes green tea)."""
        return [fact for fact in self.facts if matches(fact, topic)]

    # --- erasing -----------------------------------------------------------------------------------

    def forget_all(self) -> list[asyncio.Task[None]]:
        """Everything was erased: drop what is queued and what the model is still reading; the
        write under way (to erase again after it)."""
        self._epoch += 1
        self._queued.clear()
        self._pending.clear()
        self.facts = []
        return [self._writer] if self._writer is not None and not self._writer.done() else []

    def drop_turn(self, seq: int) -> None:
        """An operator deleted turn `seq`: it is not sent to the model."""
        self._pending = [entry for entry in self._pending if entry[0] != seq]

    async def forget(self, facts: Sequence[Fact]) -> int:
        """Erase these facts (after the writes under way, so none comes back); how many there were."""
        keys = {fact.owner for fact in facts}
        self._queued = [([f for f in puts if f.owner not in keys], drops) for puts, drops in self._queued]
        if self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)
        self.facts = [fact for fact in self.facts if fact.owner not in keys]
        return await self.store.delete_facts(self.device_id, sorted(keys))

    async def reload(self) -> None:
        """An operator changed the stored facts: read them again."""
        self.facts = await self.store.facts(self.device_id)
