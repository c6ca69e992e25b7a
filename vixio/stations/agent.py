"""AgentStation: one agent turn per user text, streamed as assistant text deltas.

The user's text is forwarded first (the transport shows it as `stt`), then the reply streams
as TextDeltaChunks, tool activity as ToolCall/ToolResult chunks, and a StreamCompleteChunk
ends the reply. When a background (async) tool finishes, `announce()` queues its result: the
station starts a turn of its own to speak it as soon as the current one is done, and a result
not spoken yet (the user barged in) travels with the user's next message. A failing agent raises: the pipeline turns it into an ErrorChunk, and the TTS
station apologises. On an interrupt the provider keeps only what the device actually played.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from vixio.core.chunk import Chunk, StreamCompleteChunk, TextChunk, TextDeltaChunk, ToolCallChunk, ToolResultChunk
from vixio.core.state import Message, TurnMetrics
from vixio.core.station import Station
from vixio.core.tools.executor import ToolExecutor
from vixio.providers.agent.base import AgentProvider, AgentTextDelta, AgentToolCall, AgentToolResult


class AgentStation(Station):
    handles = (TextChunk, ToolResultChunk)

    def __init__(
        self,
        provider: AgentProvider,
        *,
        system_prompt: str = "",
        tools: Sequence[Any] = (),
        executor: ToolExecutor | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
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
        self._turn_id = 0

    async def start(self) -> None:
        await self.provider.initialize(tools=self.tools, system_prompt=self.system_prompt)

    async def stop(self) -> None:
        for task in list(self._triggers):
            task.cancel()
        await self.provider.cancel()
        if self.executor is not None:
            await self.executor.close()

    async def on_interrupt(self) -> None:
        state = self.session_state
        if not (self._generating or state.bot_speaking):
            return
        heard = " ".join(state.heard).strip()
        await self.provider.cancel()
        self.provider.record_interrupted_reply(heard)
        state.add_message(Message(role="assistant", content=heard, interrupted=True, turn_id=self.current_turn_id))
        self.logger.info("reply interrupted; kept what was heard: {!r}", heard)
        self._generating = False

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

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, ToolResultChunk):
            if chunk.call_id:  # someone else's result: not ours to handle
                yield chunk
            elif self._notes:  # our trigger; the notes may have gone with a user turn already
                text, self._notes = "\n".join(self._notes), []
                async for out in self._turn(text, chunk.turn_id):
                    yield out
            return
        assert isinstance(chunk, TextChunk)
        yield chunk
        if chunk.role != "user":
            return
        if self.executor is not None:
            self.executor.on_user_text(chunk.text)
        self.session_state.add_message(Message(role="user", content=chunk.text, turn_id=chunk.turn_id))
        text = chunk.text
        if self._notes:
            text, self._notes = "\n".join([*self._notes, text]), []
        if self.executor is not None and (tasks := self.executor.context.task_overview()):
            text = f"{tasks}\n{text}"  # seed 004: the model sees its background work every turn
        async for out in self._turn(text, chunk.turn_id):
            yield out

    async def _turn(self, text: str, turn_id: int) -> AsyncIterator[Chunk]:
        state = self.session_state
        state.heard.clear()
        metrics = state.metrics(turn_id)
        metrics.mark("agent_start")
        self._turn_id = turn_id
        self._reply = []
        # Stays set when the turn is cancelled, so on_interrupt knows a reply was cut off.
        self._generating = True
        try:
            # aclosing: a cancelled turn closes the provider's stream now, before the interrupt
            # hooks run, so the provider settles its history before on_interrupt corrects it.
            async with contextlib.aclosing(self.provider.chat(text)) as events:
                async for event in events:
                    for out in self._translate(event, metrics):
                        yield out
        except Exception:
            self._generating = False
            raise
        self._generating = False
        state.add_message(Message(role="assistant", content="".join(self._reply), turn_id=turn_id))
        yield StreamCompleteChunk(source=self.name)

    def _translate(self, event: object, metrics: TurnMetrics) -> list[Chunk]:
        if isinstance(event, AgentTextDelta):
            if not event.text:
                return []
            metrics.mark("llm_first_token")
            self._reply.append(event.text)
            return [TextDeltaChunk(text=event.text, role="assistant")]
        if isinstance(event, AgentToolCall):
            return [ToolCallChunk(call_id=event.call_id, name=event.name, arguments=_arguments(event.arguments))]
        if isinstance(event, AgentToolResult):
            return [ToolResultChunk(call_id=event.call_id, name=event.name, result=event.output)]
        return []

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
