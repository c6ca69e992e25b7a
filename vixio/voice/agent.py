"""A session's agent, as the voice stack builds it: its provider (native tools or a text tool
protocol), instructions and reply timeouts (`agent_parts`), and its station wired to the
session's tools, background-task results and device-tool wait (`agent_station`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from vixio.config.models import VixioConfig
from vixio.core.tools.context import AsyncTaskRecord
from vixio.core.tools.converter import ToolConverterBase
from vixio.core.tools.executor import SPEAKER_REFUSAL
from vixio.core.tools.tasks import SessionTaskRunner
from vixio.providers.agent.base import AgentProvider
from vixio.providers.agent.instructions import TurnInstructions
from vixio.providers.agent.tool_support import ToolSupport
from vixio.stations import AgentStation
from vixio.stations.agent.reply_watch import ReplyTimeouts
from vixio.voice.agent_model import no_tools_guard, turn_instructions
from vixio.voice.providers import make_agent, text_protocol
from vixio.voice.session_tools import SessionTools

DEVICE_TOOLS_WAIT = 2.0
"""Seconds a turn right after hello waits for the tools the device announced (MCP)."""


@dataclass(frozen=True, slots=True)
class AgentParts:
    """An agent provider for one session and what its station and tools need with it."""

    provider: AgentProvider
    converter: ToolConverterBase | None
    """Turns the session's tools into what `provider` takes; None without tools."""
    instructions: TurnInstructions
    timeouts: ReplyTimeouts
    offered: bool
    """Whether the model is offered the tools."""


def agent_parts(config: VixioConfig, support: ToolSupport, tools: SessionTools | None) -> AgentParts:
    """A new agent provider of `config` for one session, and what goes with it."""
    assert config.agent is not None
    provider = make_agent(config)
    converter: ToolConverterBase | None = None
    if tools is not None and config.agent.tool_protocol != "native":
        from vixio.providers.agent.text_tools import TextToolAgentProvider, ToolDefinitionConverter

        provider = TextToolAgentProvider(
            provider, text_protocol(config), tools.executor, max_iterations=config.tools.max_iterations
        )
        converter = ToolDefinitionConverter()
    elif tools is not None:
        from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter

        converter = OpenAIAgentToolConverter(tools.executor)
    speech = config.speech
    timeouts = ReplyTimeouts(
        first_token=config.agent.first_token_timeout,
        gap=config.agent.token_gap_timeout,
        filler_after=speech.filler_after if speech.filler else None,
        silence=config.agent.silence_timeout,
        pause=speech.unfinished_after,
    )
    instructions = turn_instructions(config, support)
    if not support.offered and config.agent.no_tools_guard:
        from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

        if isinstance(provider, OpenAIAgentProvider):
            provider.answer_first = no_tools_guard(config, instructions)
    return AgentParts(provider, converter, instructions, timeouts, support.offered)


def agent_station(config: VixioConfig, support: ToolSupport, tools: SessionTools | None) -> AgentStation:
    """The agent station of one session, on `agent_parts`, bound to the session's tools."""
    parts = agent_parts(config, support, tools)
    speech = config.speech
    station = AgentStation(
        parts.provider,
        system_prompt=parts.instructions,
        executor=tools.executor if tools is not None else None,
        timeouts=parts.timeouts,
        empty_reply=speech.empty_reply,
        filler=speech.filler,
    )
    if tools is not None and parts.offered:
        station.before_turn = partial(tools.wait_for_device_tools, DEVICE_TOOLS_WAIT)
    if tools is not None and parts.converter is not None:
        # Not offered: the tools stay the console's and the policy's, never the model's.
        station.tools = tools.bind_agent(parts.converter, station.update_tools, offered=parts.offered)
        tools.executor.speaker = station.say
        tools.executor.speaker_refusal = SPEAKER_REFUSAL.get(config.language, SPEAKER_REFUSAL["en"])
        runner = tools.executor.async_runner
        if isinstance(runner, SessionTaskRunner):

            async def speak_result(record: AsyncTaskRecord) -> None:
                tools.context.mark_reported(record.task_id)
                station.announce(async_result_note(record))

            runner.on_complete = speak_result
    return station


def async_result_note(record: AsyncTaskRecord) -> str:
    """How a finished background task is put to the model (a user-role note naming the call)."""
    outcome = "finished" if record.status == "completed" else record.status
    return (
        f"[Background task {record.task_id} for tool call {record.call_id} ({record.tool_name}) {outcome}: "
        f"{record.to_result().text}] Tell the user about this result briefly."
    )


def history_setter(station: AgentStation) -> Callable[[list[dict[str, Any]]], None]:
    """Replaces the agent's history (an operator removed turns of the live conversation); the
    station's provider of the moment (a profile switch replaces it)."""

    def set_history(items: list[dict[str, Any]]) -> None:
        if items:
            station.provider.restore_history(items)
        else:
            station.provider.clear_history()

    return set_history
