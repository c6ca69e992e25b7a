"""SessionProfile: the profile of one live session, switched at the start of its next turn.

A reassignment (console, `vixio profile assign`) only marks the session; the switch happens in
the agent station's `before_turn`, between turns, so no reply is cut in two: the tool policy
(the agent is told the tools it now offers), a new agent provider of the profile's model that
continues the same conversation under the profile's instructions, the TTS voice, the ASR
language and the spoken texts. Memory settings and the greeting's language follow the device's
next connection (its conversation was opened with the old ones).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.profiles.book import ProfileChoice
from vixio.stations import AgentStation, ApologyStation, ASRStation, SentenceAggregatorStation, TTSStation

if TYPE_CHECKING:
    from vixio.core.pipeline import Pipeline
    from vixio.voice.session_tools import SessionTools
    from vixio.voice.stack import VoiceStack


class SessionProfile:
    """The profile a live session runs with, and the switch to another."""

    def __init__(
        self,
        session_id: str,
        choice: ProfileChoice,
        stack: VoiceStack,
        pipeline: Pipeline,
        tools: SessionTools | None,
        *,
        resolve: Callable[[str], VoiceStack],
        memory_note: str | Callable[[], str] = "",
    ) -> None:
        """`resolve` gives a profile's stack by name; `memory_note` is the device's long-term memory
        the session's instructions carry (read at every turn when callable)."""
        self.session_id = session_id
        self.choice = choice
        self.stack = stack
        self._pipeline = pipeline
        self._tools = tools
        self._resolve = resolve
        self._memory_note = memory_note
        self._pending: ProfileChoice | None = None
        self._device_choice = choice
        """The device's own profile, which an unknown voice gets back."""
        self.speaker_profile: Callable[[], str | None] | None = None
        """The profile the current turn's recognised voice selects (`speakers.people`), None for the
        device's; asked before every turn (vixio/memory/speakers.py)."""
        self._logger = logger.bind(session=session_id, component="profile")
        self._agent = _station(pipeline, AgentStation)
        self._then: Callable[[], Awaitable[None]] | None = None
        if self._agent is not None:
            self._then, self._agent.before_turn = self._agent.before_turn, self._before_turn

    @property
    def pending(self) -> ProfileChoice | None:
        """The profile the next turn switches to, if any."""
        return self._pending

    def greeting(self) -> str:
        """What the wake word is answered with in this profile."""
        return self.stack.config.xiaozhi.greeting

    def reassign(self, choice: ProfileChoice) -> None:
        """Switch to `choice` at the start of the next turn (the same profile: only its source changes)."""
        if choice.source != "speaker":
            self._device_choice = choice
        if choice.name == self.choice.name and self._pending is None:
            self.choice = choice
            return
        self._pending = choice
        self._logger.info("profile {} from the next turn ({})", choice.name, choice.source)

    async def _before_turn(self) -> None:
        if self.speaker_profile is not None and self._pending is None:
            wanted = self.speaker_profile()
            target = ProfileChoice(wanted, "speaker") if wanted else self._device_choice
            if target.name != self.choice.name:
                self._pending = target
        pending = self._pending
        if pending is not None:
            self._pending = None
            await self._switch(pending)
        if self._then is not None:
            await self._then()

    async def _switch(self, choice: ProfileChoice) -> None:
        started = time.perf_counter()
        old, stack = self.stack, self._resolve(choice.name)
        self.choice, self.stack = choice, stack
        if stack is old:
            return
        config = stack.config
        if self._tools is not None:
            await self._tools.set_policy(config.tools.policy())
        agent = self._agent
        if agent is not None and config.agent is not None:
            await self._switch_agent(agent, stack)
        speech = config.speech
        for station in self._pipeline.stations:
            if isinstance(station, TTSStation) and stack.tts_circuit is not None:
                station.circuit = stack.tts_circuit
                station.provider, station.fallback = stack.tts_circuit.provider, stack.tts_circuit.fallback
                station.apology = speech.apology
            elif isinstance(station, ApologyStation):
                station.apology = speech.apology
            elif isinstance(station, ASRStation) and stack.asr is not None and config.asr is not None:
                station.provider, station.language = stack.asr, config.asr.language
            elif isinstance(station, SentenceAggregatorStation):
                station.first_clause_min_chars = speech.first_clause_min_chars
                station.default_emotion = speech.default_emotion
        self._logger.info(
            "switched to profile {} ({}) in {:.1f} ms: model {}, voice {}",
            choice.name,
            choice.source,
            (time.perf_counter() - started) * 1000,
            _model(config.agent),
            _voice(config.tts),
        )

    async def _switch_agent(self, agent: AgentStation, stack: VoiceStack) -> None:
        """A provider of the profile's model continues the conversation under its instructions."""
        from vixio.memory.long_term import with_memory

        parts = stack.agent_parts(self._tools)
        old = agent.provider
        history = old.history
        if type(parts.provider) is not type(old):  # another framework's items: the words only
            history = [
                item
                for item in history
                if item.get("role") in ("user", "assistant") and isinstance(item.get("content"), str)
            ]
        tools = agent.tools
        if self._tools is not None and parts.converter is not None:
            tools = self._tools.rebind_agent(parts.converter, offered=parts.offered)
        instructions: Any = parts.instructions
        if self._memory_note:
            instructions = with_memory(parts.instructions, self._memory_note)
        await parts.provider.initialize(tools=tools, system_prompt=instructions)
        parts.provider.restore_history(history)
        speech = stack.config.speech
        agent.provider, agent.tools, agent.system_prompt = parts.provider, list(tools), instructions
        agent.timeouts, agent.empty_reply, agent.filler = parts.timeouts, speech.empty_reply, speech.filler
        await old.cancel()  # idle between turns: releases what the old one holds


def _station(pipeline: Pipeline, kind: type[Any]) -> Any:
    return next((station for station in pipeline.stations if isinstance(station, kind)), None)


def _model(agent: object) -> str:
    return str(getattr(agent, "model", None) or getattr(agent, "model_path", None) or "-")


def _voice(tts: object) -> str:
    return f"{getattr(tts, 'provider', '-')}:{getattr(tts, 'voice', None) or 'built-in'}" if tts is not None else "-"
