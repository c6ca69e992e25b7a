"""What the configured model is offered and told: tools or not, and each call's instructions.

A model that cannot call tools is offered none (an API may reject the `tools` field), is told
that it cannot act on the device or look anything up and must say so, and the operator is
warned once at startup. Every model's instructions carry the current date, time and weekday.
"""

from __future__ import annotations

from loguru import logger

from vixio.config.languages import language_pack
from vixio.config.models import VixioConfig
from vixio.config.pipeline import LitellmAgentConfig, LocalLlamaAgentConfig, resolve_timezone
from vixio.providers.agent.instructions import TurnInstructions
from vixio.providers.agent.no_tools_guard import RULES, NoToolsGuard
from vixio.providers.agent.tool_support import TOOL_MODELS_HINT, ToolSupport, gguf_takes_tools, litellm_function_calling

NOT_OFFERED_LABEL = "tools: not offered to this model"
"""What the operator console shows for a session whose model gets no tools."""


def tool_support(config: VixioConfig) -> ToolSupport:
    """Whether `config.agent`'s model is offered tools (a text tool protocol always offers them)."""
    agent = config.agent
    if isinstance(agent, LocalLlamaAgentConfig):
        model = agent.model_path or "SmolLM2-135M-Instruct (the bundled default)"
        if agent.tool_protocol != "native":
            return ToolSupport(True, model)
        if agent.model_path is None:
            return ToolSupport(False, model, "it is too small to choose tools")
        try:
            takes_tools = gguf_takes_tools(agent.model_path)
        except (OSError, ValueError) as exc:  # the model's own load reports the file; be safe here
            logger.debug("cannot read the chat template of {}: {}", agent.model_path, exc)
            return ToolSupport(False, model, "its chat template could not be read")
        if not takes_tools:
            return ToolSupport(False, model, "its chat template takes no tools")
        return ToolSupport(True, model)
    if isinstance(agent, LitellmAgentConfig):
        if agent.tool_protocol == "native" and litellm_function_calling(agent.model) is False:
            return ToolSupport(False, agent.model, "litellm lists it without function calling")
        return ToolSupport(True, agent.model)
    return ToolSupport(False, "", "there is no agent")


def warn_when_model_has_no_tools(config: VixioConfig) -> None:
    """One WARNING naming the model and what to switch to (the supervisor, or a lone server)."""
    agent = config.agent
    if agent is None:
        return
    support = tool_support(config)
    if support.offered:
        return
    if isinstance(agent, LocalLlamaAgentConfig) and agent.model_path is None:
        subject = "agent.model_path unset: the bundled SmolLM2-135M-Instruct"
    elif isinstance(agent, LocalLlamaAgentConfig):
        subject = f"agent.model_path {agent.model_path}"
    else:
        subject = f"agent.model {support.model}"
    logger.warning(
        "{} cannot call tools ({}), so it is offered none: it cannot change anything on the device or "
        "look anything up, and is told to say so. For tools, {}",
        subject,
        support.reason,
        TOOL_MODELS_HINT,
    )


def turn_instructions(config: VixioConfig, support: ToolSupport | None = None) -> TurnInstructions:
    """The agent's instructions: its system prompt, the clock, and its limits when it has no tools."""
    agent = config.agent
    assert agent is not None
    support = support or tool_support(config)
    pack = language_pack(config.language)
    return TurnInstructions(
        agent.system_prompt,
        clock_note=pack.clock_note,
        weekdays=pack.weekdays,
        timezone=resolve_timezone(agent.timezone),
        limits="" if support.offered else pack.no_tools_note,
    )


def no_tools_guard(config: VixioConfig, instructions: TurnInstructions) -> NoToolsGuard:
    """The honest-answer rules of `config.language`, telling the time as `instructions` do."""
    return NoToolsGuard(RULES[config.language], instructions)
