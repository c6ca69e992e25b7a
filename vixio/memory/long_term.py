"""Long-term memory: a short text of lasting facts per device, updated when a conversation ends.

    updater = long_term_updater(config)          # None with memory.long_term: off
    text = await updater.update(old_text, turns) # the device's new memory

Two ways (`memory.long_term`):

- **verbatim** (the default): the memory is the latest turns as they were said, cut to
  `memory.max_chars`. Offline, no model call, and plainly what was said, so the person it is
  about can check it. The only way for the offline local-llama agent: the bundled SmolLM2-135M
  does not summarise reliably (it repeats the conversation or invents facts).
- **model**: the configured language model (`memory.model`, else the litellm agent's) is asked
  to merge the conversation into the memory so far: names, preferences, what the user asked to
  remember; small talk and what was corrected or asked to be forgotten left out. Opt-in: it is
  one more model call per conversation, sending the conversation to the provider again.

The next conversation's instructions carry the memory (`with_memory`).
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
from vixio.state.store import StoredTurn

MEMORY_NOTE = "What you remember about this user from earlier conversations (use it when it helps):\n{memory}"
SUMMARY_PROMPT = (
    "You keep a short memory of lasting facts about the user of a voice assistant: their name, the "
    "people and things in their life, their preferences, and whatever they asked to be remembered. "
    "Update the memory with the conversation below. Keep facts that still hold; drop what was corrected "
    "or what the user asked to forget; leave out small talk, one-off questions and the assistant's own "
    "answers. Reply with the updated memory only, in short sentences, at most {max_chars} characters; "
    "reply NONE when there is nothing worth remembering.")
SUMMARY_TIMEOUT = 60.0
"""Seconds the model has to answer; then the memory stays as it was."""


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


class ModelMemory:
    """Asks a chat-completions model to merge the conversation into the memory."""

    def __init__(self, complete: Callable[[list[dict[str, str]]], Any], max_chars: int) -> None:
        self._complete = complete
        self.max_chars = max_chars

    async def update(self, memory: str, turns: Sequence[StoredTurn]) -> str:
        messages = [{"role": "system", "content": SUMMARY_PROMPT.format(max_chars=self.max_chars)},
                    {"role": "user", "content": f"Memory so far:\n{memory or '(empty)'}\n\n"
                                                f"Conversation:\n{transcript(turns)}"}]
        text = str(await asyncio.wait_for(self._complete(messages), SUMMARY_TIMEOUT) or "").strip()
        if text.upper().rstrip(".") == "NONE":
            return ""
        return text[:self.max_chars]


def long_term_updater(config: VixioConfig) -> MemoryUpdater | None:
    """What `memory.long_term` asks for (None: off, or no agent to remember for)."""
    memory, agent = config.memory, config.agent
    mode = memory.long_term
    if mode == "off" or agent is None:
        return None
    if mode == "model" and not memory.model and not isinstance(agent, LitellmAgentConfig):
        logger.warning("memory.long_term is model, but the local-llama agent has no model to summarise with "
                       "(set memory.model): keeping the latest turns verbatim instead")
        mode = "verbatim"
    if mode == "verbatim":
        return VerbatimMemory(memory.max_chars)
    api_base = agent.api_base if isinstance(agent, LitellmAgentConfig) else None
    api_key = agent.api_key if isinstance(agent, LitellmAgentConfig) else None
    model = memory.model or (agent.model if isinstance(agent, LitellmAgentConfig) else "")
    direct = isinstance(agent, LitellmAgentConfig) and agent.openai_direct and model.startswith("openai/")
    timeout = agent.timeout if isinstance(agent, LitellmAgentConfig) else None
    complete = (_openai_completion(model, api_base, api_key, timeout) if direct
                else _litellm_completion(model, api_base, api_key))
    return ModelMemory(complete, memory.max_chars)


def _openai_completion(model: str, api_base: str | None, api_key: str | None,
                       timeout: float | None) -> Callable[..., Any]:
    """`openai/...` models through the openai SDK, as the agent calls them (no litellm import), on
    the client the agent uses for that server (its pool, closed when the server stops)."""
    from vixio.providers.agent.openai_agents.clients import shared_openai_client

    async def complete(messages: list[dict[str, str]]) -> str:
        client = shared_openai_client(api_base, api_key, timeout)
        response = await client.chat.completions.create(model=model.removeprefix("openai/"),
                                                        messages=messages,  # type: ignore[arg-type]
                                                        stream=False)
        content: str | None = response.choices[0].message.content  # type: ignore[union-attr]  # stream=False
        return content or ""

    return complete


def _litellm_completion(model: str, api_base: str | None, api_key: str | None) -> Callable[..., Any]:
    async def complete(messages: list[dict[str, str]]) -> str:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price list download
        litellm = await asyncio.to_thread(importlib.import_module, "litellm")
        response = await litellm.acompletion(model=model, messages=messages, api_base=api_base, api_key=api_key,
                                             num_retries=0)
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
