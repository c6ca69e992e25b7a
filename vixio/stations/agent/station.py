"""AgentStation: one agent turn per user text, streamed as assistant text deltas.

The user's text is forwarded first (the transport shows it as `stt`), then the reply streams
as TextDeltaChunks, tool activity as ToolCall/ToolResult chunks, and a StreamCompleteChunk
ends the reply. When a background (async) tool finishes, `announce()` queues its result: the
station starts a turn of its own to speak it as soon as the current one is done, and a result
not spoken yet (the user barged in) travels with the user's next message. On an interrupt the
provider keeps only what the device actually played. A resumed session's earlier turns
(`history`) seed the provider at start, and `on_turn` hears every turn, an interrupted one again
with what was heard (vixio/memory/conversation.py stores them). A turn in progress is told as interrupted
at its start (the question) and again at each sentence the device is given, so a worker killed
mid-reply, or a stop that cuts the reply off, leaves the question and the reply so far stored.

Unhappy paths: a failing agent (or one that misses a `ReplyTimeouts` limit) is logged in one
ERROR line and becomes an ErrorChunk, so the sentence aggregator drops the cut-off fragment and
the TTS station apologises; a reply with no text at all is replaced by `empty_reply`; a slow
first token may be bridged with a spoken `filler`; a model that pauses mid-sentence has what it
said so far spoken (`ReplyTimeouts.pause`).

Preemptive turns: a DraftTextChunk (what was said up to a pause) starts the model at once as a
`HeldReply`: nothing of it is yielded, recorded or told to `on_turn`, and the executor holds
tools with side effects. The user's confirmed text adopts it when it is the same; speech again
(VADResumeChunk), a different text, an interrupt or a turn that ends without text cancel it
and restore the provider's history as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from vixio.core.chunk import (
    Chunk,
    DraftTextChunk,
    ErrorChunk,
    StreamCompleteChunk,
    TextChunk,
    TextDeltaChunk,
    ToolCallChunk,
    ToolResultChunk,
    TurnEndChunk,
    VADResumeChunk,
)
from vixio.core.session_state import Message, TurnMetrics
from vixio.core.station import Station
from vixio.core.tools.executor import ToolExecutor
from vixio.metrics import count_provider_error
from vixio.providers.agent.base import (
    AgentError,
    AgentEvent,
    AgentProvider,
    AgentTextDelta,
    AgentTextEnd,
    AgentToolCall,
    AgentToolResult,
)
from vixio.stations.agent.held_reply import HeldReply
from vixio.stations.agent.reply_watch import Filler, ReplyTimeouts, watch_reply

ANNOUNCE_WAIT = 120.0
"""Seconds a background result waits for the reply playing to end before it is spoken anyway."""


class AgentStation(Station):
    handles = (TextChunk, ToolResultChunk, DraftTextChunk, VADResumeChunk, TurnEndChunk)

    def __init__(
        self,
        provider: AgentProvider,
        *,
        system_prompt: str | Callable[[], str] = "",
        tools: Sequence[Any] = (),
        executor: ToolExecutor | None = None,
        timeouts: ReplyTimeouts | None = None,
        empty_reply: str = "Sorry, I have no answer to that.",
        filler: str = "",
        history: Sequence[dict[str, Any]] = (),
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.timeouts = timeouts or ReplyTimeouts()
        self.empty_reply = empty_reply
        """Spoken when the model answers nothing at all (empty: stay silent)."""
        self.filler = filler
        """Spoken once when the first token is later than `timeouts.filler_after` (empty: never)."""
        self.provider = provider
        self.system_prompt = system_prompt
        self.tools = list(tools)
        self.executor = executor
        """The session's tool executor: told each user turn (confirmations), closed with the station."""
        self._generating = False
        self._reply: list[str] = []
        self._notes: list[str] = []
        """Results of background tools not told to the model yet."""
        self._triggers: set[asyncio.Task[None]] = set()
        self._pauses: set[asyncio.Task[None]] = set()
        """Pause markers on their way (`_say_unfinished`)."""
        self.before_turn: Callable[[], Awaitable[None]] | None = None
        """Awaited before each turn: e.g. waits (bounded) for the device's tools after hello."""
        self._turn_id = 0
        self.history = list(history)
        """Earlier turns of this conversation (a resumed session): the provider starts from them."""
        self.on_turn: Callable[[int, str, str, bool], None] | None = None
        """Told every turn: (key, what the user said, the reply, interrupted). The same key comes
        again for the same turn: while it is in progress (interrupted, with the sentences heard so
        far), when it settles, and when its reply is cut off later (only what was heard)."""
        self._turn_key = 0
        self._said = ""
        self._in_progress = False
        """The turn's reply is being made: each sentence heard is told to `on_turn`."""
        self.intercept: Callable[[str], Awaitable[str | None]] | None = None
        """Asked first with each user text: a reply given here is said instead of the model's
        (e.g. a spoken request to forget and its confirmation); neither reaches the model."""
        self._held: HeldReply | None = None
        """The preemptive attempt waiting for its turn to be confirmed."""

    async def start(self) -> None:
        await self.provider.initialize(tools=self.tools, system_prompt=self.system_prompt)
        if self.history:
            self.provider.restore_history(self.history)

    async def stop(self) -> None:
        for task in [*self._triggers, *self._pauses]:
            task.cancel()
        if self._held is not None:
            await self._held.cancel()
        await self.provider.cancel()
        if self.executor is not None:
            await self.executor.close()

    async def on_interrupt(self) -> None:
        await self._drop_held("the turn was interrupted")
        state = self.session_state
        if not (self._generating or state.bot_speaking):
            return
        heard = " ".join(state.heard).strip()
        await self.provider.cancel()
        self.provider.record_interrupted_reply(heard)
        state.add_message(Message(role="assistant", content=heard, interrupted=True, turn_id=self.current_turn_id))
        self.logger.info("reply interrupted; kept what was heard: {!r}", heard)
        self._generating = self._in_progress = False
        self._settled(heard, interrupted=True)

    def _heard_more(self) -> None:
        """A sentence of the reply in progress reached the device: store the reply so far, as
        interrupted until the turn settles (one write per sentence, coalesced by the recorder)."""
        if self._in_progress:
            self._settled(" ".join(self.session_state.heard).strip(), interrupted=True)

    def _settled(self, reply: str, *, interrupted: bool) -> None:
        """Tell `on_turn` about the latest turn (its memory); a failing listener costs no turn."""
        if self.on_turn is None or not self._turn_key:
            return
        try:
            self.on_turn(self._turn_key, self._said, reply, interrupted)
        except Exception:
            self.logger.exception("recording turn {} failed", self._turn_id)

    def announce(self, note: str) -> None:
        """A background tool finished: have the agent tell the user (unprompted) when idle."""
        self._notes.append(note)
        if self._pipeline is None or self._triggers:
            return
        # The trigger enters at the pipeline's input, so it queues behind the turn in progress.
        task = asyncio.create_task(self._push_trigger(), name=f"vixio-{self.session_id}-announce")
        self._triggers.add(task)
        task.add_done_callback(self._triggers.discard)

    async def say(self, text: str) -> None:
        """Speak `text` now, between the reply's sentences (a tool's `ToolContext.say`)."""
        if self._pipeline is None or not text.strip():
            return
        await self._pipeline.emit(self, TextChunk(text=text.strip(), role="assistant", turn_id=self._turn_id))

    async def _push_trigger(self) -> None:
        assert self._pipeline is not None
        try:
            await self._pipeline.push(ToolResultChunk(call_id="", name="", result=""))
        except RuntimeError:  # the pipeline stopped meanwhile: the session is gone
            self.logger.info("a background result arrived as the session ended; not spoken")

    async def _until_reply_played(self) -> None:
        """Wait (bounded) until nothing is on its way to the device and it is not speaking."""
        pipeline = self._pipeline
        if pipeline is None:
            return
        deadline = asyncio.get_running_loop().time() + ANNOUNCE_WAIT
        quiet_checks = 0
        while quiet_checks < 2 and asyncio.get_running_loop().time() < deadline:
            # Twice in a row: the output pump may be between taking a chunk and handing it on.
            quiet = not self.session_state.bot_speaking and pipeline.quiet_after(self)
            quiet_checks = quiet_checks + 1 if quiet else 0
            if quiet_checks < 2:
                await asyncio.sleep(0.05)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, DraftTextChunk):
            await self._hold(chunk)
            return
        if isinstance(chunk, VADResumeChunk | TurnEndChunk):
            # Confirmed text adopts the attempt before its TurnEndChunk comes: one still held
            # then was not confirmed.
            await self._drop_held("the user went on" if isinstance(chunk, VADResumeChunk) else "no text confirmed it")
            yield chunk
            return
        if isinstance(chunk, ToolResultChunk):
            if chunk.call_id:  # someone else's result: not ours to handle
                yield chunk
                return
            # Our trigger. A reply still playing must end first: the result is its own reply,
            # with its own `tts start`/`tts stop` (frames after a `tts stop` are dropped).
            await self._until_reply_played()
            if self._notes:  # the notes may have gone with a user turn already
                text, self._notes = "\n".join(self._notes), []
                async for out in self._turn(text, chunk.turn_id, said=""):
                    yield out
            return
        assert isinstance(chunk, TextChunk)
        yield chunk
        if chunk.role != "user":
            return
        if self.executor is not None:
            self.executor.on_user_text(chunk.text)
        self.session_state.add_message(Message(role="user", content=chunk.text, turn_id=chunk.turn_id))
        if self.intercept is not None and (answer := await self.intercept(chunk.text)) is not None:
            await self._drop_held("the turn was answered without the model")
            self.session_state.add_message(Message(role="assistant", content=answer, turn_id=chunk.turn_id))
            yield TextDeltaChunk(text=answer, role="assistant")
            yield StreamCompleteChunk(source=self.name)
            return
        text = self._model_input(chunk.text)
        held = await self._adopt(text, chunk.turn_id)
        self._notes = []
        async for out in self._turn(text, chunk.turn_id, said=chunk.text, held=held):
            yield out

    def _model_input(self, said: str) -> str:
        """What the model is sent for the user's words: pending background results first."""
        text = "\n".join([*self._notes, said]) if self._notes else said
        if self.executor is not None and (tasks := self.executor.context.task_overview()):
            text = f"{tasks}\n{text}"  # docs/tool-systems.md §6.2: the model sees its background work every turn
        return text

    async def _hold(self, draft: DraftTextChunk) -> None:
        """Start the model on the draft, its reply held (a newer draft replaces an older one)."""
        await self._drop_held("a newer draft replaced it")
        text = self._model_input(draft.text)
        if self.executor is not None:
            self.executor.hold()
        self._held = HeldReply(
            text,
            self._held_events(text),
            history_before=self.provider.history,
            turn_id=draft.turn_id,
            name=f"vixio-{self.session_id}-held-reply",
        )
        self.session_state.metrics(draft.turn_id).remark("preemptive_start", self._held.started_at)
        self.logger.debug("preemptive turn on {!r}", draft.text)

    async def _held_events(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        if self.before_turn is not None:
            await self.before_turn()
        async for event in self.provider.chat(text):
            yield event

    async def _adopt(self, text: str, turn_id: int) -> HeldReply | None:
        """The held attempt, when it ran on `text` (the turn is confirmed); else it is dropped."""
        held = self._held
        if held is None:
            return None
        if held.text != text:
            await self._drop_held("the confirmed text differs")
            return None
        self._held = None
        metrics = self.session_state.metrics(turn_id)
        metrics.mark("turn_confirmed")
        metrics.notes["agent_saved_ms"] = held.saved_ms(metrics.marks["turn_confirmed"])
        if self.executor is not None:
            self.executor.release(confirmed=True)
        return held

    async def _drop_held(self, why: str) -> None:
        """Cancel the held attempt without a trace: the provider's history is as before it."""
        held, self._held = self._held, None
        if held is None:
            return
        await held.cancel()
        await self.provider.cancel()
        self.provider.restore_history(held.history_before)
        if self.executor is not None:
            self.executor.release(confirmed=False)
        notes = self.session_state.metrics(held.turn_id).notes
        notes["preemptive_cancelled"] = int(notes.get("preemptive_cancelled", 0)) + 1
        self.logger.info("preemptive turn cancelled ({}): {!r}", why, held.text[:80])

    async def _turn(self, text: str, turn_id: int, *, said: str, held: HeldReply | None = None) -> AsyncIterator[Chunk]:
        """One model turn on `text`; `said` is the user's own words in it ("" for a turn the
        assistant starts, e.g. a background result). With `held`, the turn is that preemptive
        attempt's, adopted."""
        if held is None and self.before_turn is not None:
            await self.before_turn()
        state = self.session_state
        state.heard.clear()
        metrics = state.metrics(turn_id)
        metrics.mark("agent_start", held.started_at if held is not None else None)
        if held is not None and held.first_token_at is not None:
            metrics.mark("llm_first_token", held.first_token_at)
        self._turn_id = turn_id
        self._turn_key += 1
        self._said = said
        self._reply = []
        self._in_progress = True
        state.on_heard = self._heard_more
        if said:  # the question is stored now, before any reply
            self._settled("", interrupted=True)
        # Stays set when the turn is cancelled, so on_interrupt knows a reply was cut off.
        self._generating = True
        timeouts = self.timeouts if self.filler else replace(self.timeouts, filler_after=None)
        where = str(getattr(self.provider, "where", type(self.provider).__name__))
        source = held.replay() if held is not None else self.provider.chat(text)
        watched = watch_reply(
            source,
            timeouts,
            where=where,
            audio_until=lambda: state.audio_until,
            on_pause=lambda: self._say_unfinished(turn_id),
        )
        try:
            # aclosing: a cancelled turn closes the provider's stream now, before the interrupt
            # hooks run, so the provider settles its history before on_interrupt corrects it.
            async with contextlib.aclosing(watched) as events:
                async for event in events:
                    if isinstance(event, Filler):
                        self.logger.info("the model is slow to answer; saying {!r}", self.filler)
                        yield TextChunk(text=self.filler, role="assistant")
                        continue
                    for out in self._translate(event, metrics):
                        yield out
        except AgentError as exc:
            self._generating = self._in_progress = False
            count_provider_error("agent", exc)
            self.logger.error("turn {} failed: {}", turn_id, exc)
            yield ErrorChunk(source=self.name, message=str(exc), exception=exc)
            return
        except Exception:
            self._generating = self._in_progress = False
            raise
        self._generating = self._in_progress = False
        reply = "".join(self._reply)
        if not reply.strip() and self.empty_reply:
            self.logger.warning("turn {}: the model answered nothing; saying {!r}", turn_id, self.empty_reply)
            reply = self.empty_reply
            yield TextDeltaChunk(text=reply, role="assistant")
        state.add_message(Message(role="assistant", content=reply, turn_id=turn_id))
        self._settled(reply, interrupted=False)
        yield StreamCompleteChunk(source=self.name)

    def _translate(self, event: object, metrics: TurnMetrics) -> list[Chunk]:
        if isinstance(event, AgentTextDelta):
            if not event.text:
                return []
            metrics.mark("llm_first_token")
            self._reply.append(event.text)
            return [TextDeltaChunk(text=event.text, role="assistant")]
        if isinstance(event, AgentTextEnd):
            return [TextDeltaChunk(text="", role="assistant", ends_text=True)]
        if isinstance(event, AgentToolCall):
            return [ToolCallChunk(call_id=event.call_id, name=event.name, arguments=_arguments(event.arguments))]
        if isinstance(event, AgentToolResult):
            return [ToolResultChunk(call_id=event.call_id, name=event.name, result=event.output)]
        return []

    def _say_unfinished(self, turn_id: int) -> None:
        """The model paused mid-sentence: have what it said so far spoken now (an empty delta that
        ends the text makes the sentence aggregator speak its buffer)."""
        if self._pipeline is None:
            return
        pause = TextDeltaChunk(text="", role="assistant", ends_text=True, paused=True, turn_id=turn_id)
        task = asyncio.create_task(self._pipeline.emit(self, pause), name=f"vixio-{self.session_id}-pause")
        self._pauses.add(task)
        task.add_done_callback(self._pauses.discard)

    async def update_tools(self, tools: Sequence[Any]) -> None:
        """Replace the agent's tools mid-session (e.g. when the device's tools arrive)."""
        self.tools = list(tools)
        await self.provider.update_tools(self.tools)


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}
