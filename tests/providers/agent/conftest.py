from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from vixio.testing.llm_server import ScriptedLLMServer


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    """A scripted OpenAI-compatible server; the test decides whether all replies must be used."""
    async with ScriptedLLMServer() as scripted:
        yield scripted


@pytest.fixture
def make_provider(server: ScriptedLLMServer) -> Callable[..., Any]:
    """Build an OpenAIAgentProvider talking litellm -> HTTP -> the scripted server."""
    from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

    def make(**kwargs: Any) -> OpenAIAgentProvider:
        return OpenAIAgentProvider("openai/test-model", api_base=server.base_url, api_key="test", **kwargs)

    return make
