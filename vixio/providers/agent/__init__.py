"""Agent providers: the `AgentProvider` contract and its backends.

The contract (`base`) is cheap to import; backends load openai-agents (~2 s) and, for
`LocalLlamaAgentProvider`, llama-cpp-python, so they are imported on first attribute access.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from vixio.providers.agent.base import (
    AgentError,
    AgentEvent,
    AgentProvider,
    AgentTextDelta,
    AgentTextEnd,
    AgentToolCall,
    AgentToolResult,
)

_BACKENDS = {
    "OpenAIAgentProvider": "vixio.providers.agent.openai_agents.provider",
    "LocalLlamaAgentProvider": "vixio.providers.agent.llama.provider",
    "LocalLlamaModel": "vixio.providers.agent.llama.provider",
}

__all__ = [
    "AgentError",
    "AgentEvent",
    "AgentProvider",
    "AgentTextDelta",
    "AgentTextEnd",
    "AgentToolCall",
    "AgentToolResult",
    "LocalLlamaAgentProvider",
    "LocalLlamaModel",
    "OpenAIAgentProvider",
]


def __getattr__(name: str) -> Any:
    """Import a backend class on first use."""
    if name in _BACKENDS:
        return getattr(import_module(_BACKENDS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
