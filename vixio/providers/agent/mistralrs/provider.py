"""The local agent model on mistral.rs: the llama backend's `LocalLlamaModel` (messages, clock,
streaming in the one inference thread, cancellation, tool calls read from text) with the engine
swapped for vixio.providers.agent.mistralrs.engine, whose wheel installs in seconds where
llama-cpp-python compiles for ~15 minutes on 2 cores.

Only what differs is here: loading, and a forced tool call, generated under mistral.rs' JSON
schema grammar instead of llama.cpp's GBNF.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openai.types.chat import ChatCompletionChunk

from vixio.providers.agent.llama import tools as local_tools
from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider, LocalLlamaModel
from vixio.providers.agent.llama.weights import INFERENCE
from vixio.providers.agent.mistralrs.engine import WEIGHTS_HINT, MistralrsChat, load_mistralrs


class LocalMistralrsModel(LocalLlamaModel):
    """`LocalLlamaModel` running in mistral.rs."""

    weights_hint = WEIGHTS_HINT
    _load_engine = staticmethod(load_mistralrs)

    async def _forced_call(
        self,
        llama: Any,
        system_instructions: str | None,
        input: str | list[Any],
        chat_tools: list[Any],
        choice: str,
        options: dict[str, Any],
    ) -> list[ChatCompletionChunk]:
        """One call generated under a grammar that admits only a call of the offered tools."""
        messages = self._messages(system_instructions, input, local_tools.tools_prompt(chat_tools))
        schema = local_tools.forced_call_schema(chat_tools, choice)
        engine: MistralrsChat = llama
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(INFERENCE, engine.json_call, messages, schema, 256)
        return local_tools.call_chunks([local_tools.forced_call(text)], self.name)


class LocalMistralrsAgentProvider(LocalLlamaAgentProvider):
    """The local agent provider (SmolLM2 by default) on mistral.rs, fully offline."""

    model_type = LocalMistralrsModel
