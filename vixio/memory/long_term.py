"""Long-term memory beyond the facts: the verbatim text memory, and the model that extracts facts.

    updater = long_term_updater(config)          # VerbatimMemory with memory.long_term: verbatim, else None
    model = fact_model(config)                   # ModelFacts with memory.long_term: model, else None

`memory.long_term` (docs/memory.md):

- **facts** (the default): facts learnt by rules from every utterance (vixio/state/fact_rules.py),
  offline. The bundled SmolLM2-135M does not summarise or extract reliably (it repeats the
  conversation or invents facts, "I've lost all of my memories"), so nothing it says is stored.
- **model**: the rules, plus the configured language model (`memory.model`, else the litellm
  agent's) asked for facts as JSON (vixio/state/fact_model.py). Opt-in: one more model call per
  10 utterances, sending them to the provider again.
- **verbatim**: the latest turns as they were said, cut to `memory.max_chars` (the earlier default).

The next conversation's instructions carry the facts and any memory text (`with_memory`); an
operator can write that text (console, `vixio memory set`) in every mode but off.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from loguru import logger

from vixio.config.models import VixioConfig
from vixio.config.pipeline import LitellmAgentConfig
from vixio.state.fact_model import ModelFacts
from vixio.state.store import StoredTurn

MEMORY_NOTE = (
    "What you remember about this user from earlier conversations (use it when it helps; a date is when "
    "it was said):\n{memory}"
)


class MemoryUpdater(Protocol):
    async def update(self, memory: str, turns: Sequence[StoredTurn]) -> str:
        """The device's memory after `turns` (the conversation that just ended), from `memory`."""
        ...


def transcript(turns: Sequence[StoredTurn]) -> str:
    lines: list[str] = []
    for turn in turns:
        if turn.user:
            lines.append(f"User: {turn.user}")
        if turn.assistant:
            lines.append(f"Assistant: {turn.assistant}{' [interrupted]' if turn.interrupted else ''}")
    return "\n".join(lines)


class VerbatimMemory:
    """The latest turns as they were said, whole lines, at most `max_chars`."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars

    async def update(self, memory: str, turns: Sequence[StoredTurn]) -> str:
        lines = [*memory.splitlines(), *transcript(turns).splitlines()]
        kept: list[str] = []
        size = 0
        for line in reversed(lines):
            if size + len(line) + 1 > self.max_chars:
                break
            kept.append(line)
            size += len(line) + 1
        return "\n".join(reversed(kept))


def long_term_updater(config: VixioConfig) -> MemoryUpdater | None:
    """The text memory `memory.long_term` asks for: VerbatimMemory with "verbatim", else None."""
    if config.memory.long_term != "verbatim" or config.agent is None:
        return None
    return VerbatimMemory(config.memory.max_chars)


def fact_model(config: VixioConfig) -> ModelFacts | None:
    """The model that extracts facts with `memory.long_term: model` (None: the rules alone)."""
    memory, agent = config.memory, config.agent
    if memory.long_term != "model" or agent is None:
        return None
    if not memory.model and not isinstance(agent, LitellmAgentConfig):
        logger.warning(
            "memory.long_term is model, but the local-llama agent has no model to extract facts with "
            "(set memory.model): the rules alone learn facts (memory.long_term: facts)"
        )
        return None
    api_base = agent.api_base if isinstance(agent, LitellmAgentConfig) else None
    api_key = agent.api_key if isinstance(agent, LitellmAgentConfig) else None
    model = memory.model or (agent.model if isinstance(agent, LitellmAgentConfig) else "")
    direct = isinstance(agent, LitellmAgentConfig) and agent.openai_direct and model.startswith("openai/")
    timeout = agent.timeout if isinstance(agent, LitellmAgentConfig) else None
    complete = (
        _openai_completion(model, api_base, api_key, timeout)
        if direct
        else _litellm_completion(model, api_base, api_key)
    )
    return ModelFacts(complete)


def _openai_completion(
    model: str, api_base: str | None, api_key: str | None, timeout: float | None
) -> Callable[..., Any]:
    """`openai/...` models through the openai SDK, as the agent calls them (no litellm import), on
    the client the agent uses for that server (its pool, closed when the server stops)."""
    from vixio.providers.agent.openai_agents.clients import shared_openai_client

    async def complete(messages: list[dict[str, str]]) -> str:
        client = shared_openai_client(api_base, api_key, timeout)
        response = await client.chat.completions.create(
            model=model.removeprefix("openai/"),
            messages=messages,  # type: ignore[arg-type]
            stream=False,
        )
        content: str | None = response.choices[0].message.content  # type: ignore[union-attr]  # stream=False
        return content or ""

    return complete


def _litellm_completion(model: str, api_base: str | None, api_key: str | None) -> Callable[..., Any]:
    async def complete(messages: list[dict[str, str]]) -> str:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price list download
        litellm = await asyncio.to_thread(importlib.import_module, "litellm")
        response = await litellm.acompletion(
            model=model, messages=messages, api_base=api_base, api_key=api_key, num_retries=0
        )
        return response.choices[0].message.content or ""

    return complete


def with_memory(instructions: str | Callable[[], str], memory: str | Callable[[], str]) -> Callable[[], str]:
    """`instructions` (rendered per call) followed by the device's memory (read per call when
    callable; no note while it is empty)."""

    def render() -> str:
        base = instructions() if callable(instructions) else instructions
        text = (memory() if callable(memory) else memory).strip()
        if not text:
            return base
        note = MEMORY_NOTE.format(memory=text)
        return f"{base}\n\n{note}" if base else note

    return render
