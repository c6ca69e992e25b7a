"""The voice stack the config describes: providers built once per process, stations per session.

    VADStation → TurnDetectorStation → ASRStation → TextAggregatorStation → AgentStation
    → SentenceAggregatorStation → TTSStation (text only: ApologyStation)

Models (Silero, Whisper, Piper, SmolLM2) load in `load()`, once, before the first device
connects; a session only creates its cheap per-session state (a VAD stream, an agent
conversation). Each profile (`profiles:`, vixio/config/profiles.py) is a stack of its own over
its whole config (`for_profile`), sharing every provider its config does not change.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.config.models import VixioConfig
from vixio.config.pipeline import EdgeTTSConfig, OpenAITTSConfig
from vixio.core.pipeline import Pipeline
from vixio.core.station import Station
from vixio.core.tools.context import AsyncTaskRecord
from vixio.core.tools.tasks import AsyncTaskQueue, SessionTaskRunner, task_status_tool
from vixio.core.tools.types import ToolDefinition
from vixio.providers.agent.openai_agents.clients import close_openai_clients
from vixio.providers.asr.base import ASRProvider
from vixio.providers.prewarm import Prewarmer
from vixio.providers.tts.base import TTSProvider
from vixio.providers.vad.base import VADProvider
from vixio.stations import (
    ApologyStation,
    ASRStation,
    SentenceAggregatorStation,
    TextAggregatorStation,
    TTSStation,
    TurnDetectorStation,
    VADStation,
)
from vixio.stations.asr.endpointing import EndpointRules
from vixio.stations.interruption import interruption_arbiter
from vixio.stations.tts.circuit import TTSCircuit
from vixio.voice.agent import AgentParts, agent_parts, agent_station, history_setter
from vixio.voice.agent_model import tool_support
from vixio.voice.local_tools import builtin_names, builtin_tools, configured_local_tools
from vixio.voice.providers import (
    load_tts_fallback,
    make_agent,
    make_asr,
    make_prewarmer,
    make_tts,
    make_vad,
    provider_kind,
)
from vixio.voice.session_tools import SessionTools

if TYPE_CHECKING:
    from vixio.memory.recording import Conversation
    from vixio.providers.tools.mcp_servers import McpServerPool


class VoiceStack:
    """Shared providers plus a per-session pipeline factory."""

    def __init__(self, config: VixioConfig, *, base: VoiceStack | None = None) -> None:
        """`base`: the top-level stack, when this one is a profile's (`for_profile`): its
        configured local tools, MCP servers, background task queue and unchanged providers are shared."""
        self.config = config
        self.base = base
        self.vad: VADProvider | None = None
        self.asr: ASRProvider | None = None
        self.tts: TTSProvider | None = None
        self.tts_fallback: TTSProvider | None = None
        """Speaks while `tts` fails (`tts.fallback`, or the offline voice installed), None without one."""
        self.tts_circuit: TTSCircuit | None = None
        """Whether `tts` or its fallback speaks, shared by every session of the process."""
        self.local_tools: list[ToolDefinition] = builtin_tools(config) + (
            base.local_tools[len(builtin_names(base.config)) :] if base is not None else configured_local_tools(config)
        )
        """Local tools every session gets (built-ins, `tools.local`; add your own before the first session)."""
        self.reminder_tools: list[ToolDefinition] = []
        """set/list/cancel_reminder, bound to the store by the server when `tools.builtin` has `reminders`."""
        self._task_queue: AsyncTaskQueue | None = None
        self.results_after_session: Callable[[str, AsyncTaskRecord], Awaitable[None]] | None = None
        """Gets (device id, record) for each background task that finishes after its session
        ended (vixio/app/task_results.py); None: a session's tasks are cancelled when it ends."""
        self.mcp: McpServerPool | None = None
        """Third-party MCP servers (tools.mcp_servers), connected in `load()`."""
        self.tool_support = tool_support(config)
        """Whether the agent's model is offered tools (not: it is told it cannot act)."""
        self.profiles: dict[str, VoiceStack] = {}
        """The stacks of the config's profiles by name, made in `load()`."""
        self._owned: list[ASRProvider | TTSProvider] = []
        """Providers this stack made (and closes)."""
        self.prewarm: Prewarmer | None = None
        """Opens the cloud APIs' connections ahead of a turn (`pipeline.prewarm`), made in `load()`."""
        self.speaker_encoder: Any = None
        """The speaker encoder (`speakers.enabled`), loaded in `load()` and shared by the profiles."""

    def for_profile(self, name: str) -> VoiceStack:
        """The stack of profile `name` (`default` or an unknown name: this one)."""
        return self.profiles.get(name, self)

    async def load(self) -> None:
        """Build the shared providers and load their models (once per process), then each profile's."""
        started = time.perf_counter()
        config = self.config
        base = self.base
        if config.asr is not None:
            self.vad = base.vad if base is not None and base.vad is not None else make_vad(config)
            if base is not None and _same(config.asr, base.config.asr, but="language"):
                self.asr = base.asr  # the language is the station's (`ASRStation.language`)
            else:
                self.asr = make_asr(config)
                await self.asr.initialize()
                self._owned.append(self.asr)
        if config.tts is not None and base is not None and _same(config.tts, base.config.tts):
            self.tts, self.tts_fallback, self.tts_circuit = base.tts, base.tts_fallback, base.tts_circuit
        elif config.tts is not None:
            self.tts = make_tts(config.tts)
            await self.tts.initialize()
            self.tts_fallback = await load_tts_fallback(config)
            self._owned += [provider for provider in (self.tts, self.tts_fallback) if provider is not None]
            waits = getattr(config.tts, "fallback_after", None) if self.tts_fallback is not None else None
            online = isinstance(config.tts, OpenAITTSConfig | EdgeTTSConfig)
            self.tts_circuit = TTSCircuit(
                self.tts, self.tts_fallback, first_audio_timeout=waits, breaks=online or self.tts_fallback is not None
            )
        self.prewarm = make_prewarmer(config, self.asr, self.tts)
        if base is not None:
            self.speaker_encoder = base.speaker_encoder
        elif config.speakers.enabled and config.asr is not None:
            from vixio.providers.speaker.encoder import SpeakerEncoder

            self.speaker_encoder = SpeakerEncoder(config.speakers.model)
        if config.agent is not None and (base is None or not _same(config.agent, base.config.agent)):
            await make_agent(config).initialize(system_prompt="")  # loads local weights once
        if base is not None:
            self.mcp = base.mcp
        elif config.agent is not None and config.tools.enabled and config.tools.mcp_servers:
            from vixio.providers.tools.mcp_servers import McpServerPool

            self.mcp = McpServerPool(config.tools.mcp_servers)
            await self.mcp.start()  # a server that fails is logged and left out; the others work
        what = f"profile {_profile_name(self)}" if base is not None else "voice stack"
        logger.info(
            "{} ready in {:.1f} s: asr={} agent={} tts={}",
            what,
            time.perf_counter() - started,
            provider_kind(config.asr),
            provider_kind(config.agent),
            provider_kind(config.tts),
        )
        if base is None:
            await self._load_profiles()

    async def _load_profiles(self) -> None:
        from vixio.profiles.book import ProfileBook

        book = ProfileBook(self.config)
        for name in self.config.profiles:
            stack = VoiceStack(book.effective(name), base=self)
            stack.results_after_session = self.results_after_session
            self.profiles[name] = stack
            await stack.load()

    def session_tools(self, session_id: str, *, device_id: str = "") -> SessionTools | None:
        """A new session's tools (None without an agent): local tools now; device, registerTools
        and MCP tools as they become known."""
        if self.config.agent is None:
            return None
        tools = SessionTools(session_id, self.config.tools.policy(), local=self.local_tools)
        tools.executor.device_id = device_id
        runner = SessionTaskRunner(self.task_queue, tools.context, session_id=session_id)
        runner.tool_timeout = tools.toolset.policy.configured_timeout  # tools.timeouts / a local entry's timeout
        tools.set_async_runner(runner)
        if device_id and self.results_after_session is not None:  # the device may come back for them
            tools.add_closer(partial(runner.release, partial(self.results_after_session, device_id)))
        else:
            tools.add_closer(runner.cancel_all)
        if reminder_tools := (self.base or self).reminder_tools:
            tools.add_source("reminders", reminder_tools)
        if self.config.tools.async_tools.tools or any(tool.is_async for tool in self.local_tools):
            tools.add_source("tasks", [task_status_tool(runner)])
        if self.mcp is not None:
            for key, definitions in self.mcp.process_tools().items():
                tools.add_source(key, definitions)
            if self.mcp.has_session_servers:
                tools.start_background(_open_session_mcp(self.mcp, tools), "mcp")
        return tools

    @property
    def task_queue(self) -> AsyncTaskQueue:
        """The process's queue of background (async) tool tasks, made on first use."""
        if self.base is not None:
            return self.base.task_queue
        if self._task_queue is None:
            settings = self.config.tools.async_tools
            self._task_queue = AsyncTaskQueue(settings.max_concurrent, timeout=settings.timeout)
        return self._task_queue

    async def close(self) -> None:
        """Cancel background tool tasks still running, stop MCP servers and close the shared ASR and
        TTS providers and the agents' HTTP clients (the server is stopping)."""
        for stack in self.profiles.values():
            await stack.close()
        if self._task_queue is not None:
            await self._task_queue.shutdown()
        if self.mcp is not None and self.base is None:
            await self.mcp.close()
        if self.prewarm is not None:
            await self.prewarm.close()
        if self.tts_circuit is not None and (self.base is None or self.tts_circuit is not self.base.tts_circuit):
            await self.tts_circuit.close()
        # Close connection pools now, not at interpreter exit (aiohttp: "Unclosed client session").
        for provider in self._owned:
            await provider.close()
        if self.base is None:  # the agents' shared clients, after the sessions that used them
            await close_openai_clients()

    def build_pipeline(
        self,
        session_id: str,
        *,
        tools: SessionTools | None = None,
        conversation: Conversation | None = None,
        on_forgotten: Callable[[], None] | None = None,
    ) -> Pipeline:
        """The stations of one session, sharing this stack's providers.

        Without `tools`, the session gets its own `session_tools()` (local tools only unless
        the caller feeds it device tools). With `conversation` (memory on), the agent starts from
        its restored turns and records each new one; `on_forgotten` is called after the user had
        it all erased by voice (vixio/memory/forget.py), the model's history emptied first.
        """
        config = self.config
        if self.prewarm is not None:  # the device just connected: its user speaks in a second
            self.prewarm()
        stations: list[Station] = []
        speakers = _speakers(self, conversation)
        if self.vad is not None and self.asr is not None and config.asr is not None:
            vad, turn = config.vad, config.turn
            rules = EndpointRules(
                punctuation=turn.confirm_on_punctuation,
                hanging_words=turn.hanging_words,
                hanging_silence_ms=turn.hanging_silence_ms,
            )
            stations += [
                VADStation(
                    self.vad,
                    threshold=vad.threshold,
                    min_speech_ms=vad.min_speech_ms,
                    min_silence_ms=vad.min_silence_ms,
                    speech_pad_ms=vad.speech_pad_ms,
                    early_silence_ms=vad.early_silence_ms,
                    barge_in=vad.barge_in,
                    arbiter=interruption_arbiter(vad) if vad.barge_in_pause else None,
                    quiet_below_dbfs=vad.quiet_below_dbfs,
                    transcribe=partial(self.asr.transcribe, language=config.asr.language)
                    if vad.barge_in_words
                    else None,
                    partial_ms=vad.barge_in_partial_ms,
                ),
                TurnDetectorStation(min_speech_ms=turn.min_speech_ms),
                ASRStation(
                    self.asr,
                    language=config.asr.language,
                    endpointing=rules,
                    min_silence_ms=vad.min_silence_ms,
                    on_speech=self.prewarm,
                    speaker=speakers[0] if speakers is not None else None,
                ),
            ]
        stations.append(TextAggregatorStation())
        if config.agent is not None:
            station = agent_station(self.config, self.tool_support, tools or self.session_tools(session_id))
            if conversation is not None:
                station.history = conversation.history_items()
                station.on_turn = conversation.record
                from vixio.memory.long_term import with_memory

                # Read at every turn: an operator's edit (the console) applies from the next one.
                station.system_prompt = with_memory(station.system_prompt, conversation.memory_text)
                conversation.on_history = history_setter(station)
                from vixio.memory.forget import ForgetRequest

                policy = tools.toolset.policy if tools is not None else config.tools.policy()
                forget = ForgetRequest(conversation, language=config.language, confirms=policy.confirms)

                def forgotten() -> None:
                    station.provider.clear_history()  # the provider of now (a profile switch replaces it)
                    station.session_state.history.clear()  # the console's Sessions pane shows these words
                    if on_forgotten is not None:
                        on_forgotten()

                forget.on_forgotten = forgotten
                station.intercept = forget.intercept
                if speakers is not None:
                    station.intercept = _first_answer(
                        speakers[1](lambda: station.session_state).intercept, forget.intercept
                    )
            stations.append(station)
        stations.append(
            SentenceAggregatorStation(
                first_clause_min_chars=config.speech.first_clause_min_chars,
                default_emotion=config.speech.default_emotion,
            )
        )
        if self.tts is not None:
            stations.append(
                TTSStation(self.tts, output_sample_rate=24000, apology=config.speech.apology, circuit=self.tts_circuit)
            )
        else:  # text only: a failed turn must still end (Xiaozhi: `tts stop`)
            stations.append(ApologyStation(apology=config.speech.apology))
        return Pipeline(stations, session_id=session_id, queue_size=config.pipeline.queue_size)

    def agent_parts(self, tools: SessionTools | None) -> AgentParts:
        """A new agent provider of this stack's config for one session, and what goes with it."""
        return agent_parts(self.config, self.tool_support, tools)


async def _open_session_mcp(pool: McpServerPool, tools: SessionTools) -> None:
    """Connect the session-scoped MCP servers; their tools join as each session's own."""
    servers = await pool.open_session(tools.session_id)
    if tools.closed:  # the device left while the servers started
        await servers.close()
        return
    tools.add_closer(servers.close)
    for key, definitions in servers.tools().items():
        await tools.update_source(key, definitions)


def _speakers(stack: VoiceStack, conversation: Conversation | None) -> tuple[Any, Any] | None:
    """A session's speaker identifier and a maker of its spoken enrolment (given the session state),
    when voiceprints are on: they need the encoder and the device's store (memory on)."""
    settings = stack.config.speakers
    if stack.speaker_encoder is None or conversation is None or not settings.enabled:
        return None
    from vixio.memory.speakers import SpeakerBook, VoiceEnrolment
    from vixio.stations.asr.speaker_id import SpeakerIdentifier

    book = SpeakerBook(conversation.store, conversation.device_id)
    identifier = SpeakerIdentifier(
        stack.speaker_encoder, voiceprints=book.prints, threshold=settings.threshold, wait=settings.wait_ms / 1000
    )
    return identifier, partial(
        VoiceEnrolment, book, language=stack.config.language, utterances=settings.enrol_utterances
    )


def _first_answer(*intercepts: Callable[[str], Awaitable[str | None]]) -> Callable[[str], Awaitable[str | None]]:
    """One agent intercept from several: the first that answers a turn answers it."""

    async def intercept(text: str) -> str | None:
        for each in intercepts:
            if (answer := await each(text)) is not None:
                return answer
        return None

    return intercept


def _same(section: Any, other: Any, *, but: str = "") -> bool:
    """Whether two config sections name the same provider with the same settings (`but` aside)."""
    if section is None or other is None or type(section) is not type(other):
        return False
    exclude = {but} if but else None
    return bool(section.model_dump(exclude=exclude) == other.model_dump(exclude=exclude))


def _profile_name(stack: VoiceStack) -> str:
    base = stack.base
    return next((name for name, each in base.profiles.items() if each is stack), "?") if base is not None else "default"
