"""The local agent model on mistral.rs: the llama backend's `LocalLlamaModel` (messages, clock,
streaming in the one inference thread, cancellation, tool calls read from text) with the engine
swapped for vixio.providers.agent.mistralrs.engine, whose wheel installs in seconds where
llama-cpp-python compiles for ~15 minutes on 2 cores.

Only what differs is here: loading, and a forced tool call, generated under mistral.rs' JSON
schema grammar instead of llama.cpp's GBNF.
"""

from __future__ import annotations

from typing import Any

from vixio.providers.agent.llama import tools as local_tools
from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider, LocalLlamaModel
from vixio.providers.agent.mistralrs.engine import WEIGHTS_HINT, MistralrsChat, load_mistralrs


class LocalMistralrsModel(LocalLlamaModel):
    """`LocalLlamaModel` running in mistral.rs."""

    weights_hint = WEIGHTS_HINT
    _load_engine = staticmethod(load_mistralrs)

    def _forced_text(
        self, llama: Any, messages: list[Any], chat_tools: list[Any], choice: str, options: dict[str, Any]
    ) -> str:
        """One call generated under a grammar that admits only a call of the offered tools."""
        engine: MistralrsChat = llama
        return str(engine.json_call(messages, local_tools.forced_call_schema(chat_tools, choice), 256))


class LocalMistralrsAgentProvider(LocalLlamaAgentProvider):
    """The local agent provider (SmolLM2 by default) on mistral.rs, fully offline."""

    model_type = LocalMistralrsModel
