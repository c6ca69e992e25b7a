"""The shared AsyncOpenAI client belongs to one event loop: a new loop (a restarted server, the
next test) on the same server address gets its own, never a client bound to a closed loop."""

from __future__ import annotations

import asyncio

import pytest

from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration


def test_each_event_loop_gets_its_own_client_for_the_same_server() -> None:
    ports: list[int] = []

    async def one_turn() -> str:
        async with ScriptedLLMServer(Reply.text("Hello there."), port=ports[0] if ports else 0) as server:
            ports.append(server.port)
            provider = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
            await provider.initialize()
            return "".join([event.text async for event in provider.chat("hi") if hasattr(event, "text")])

    assert asyncio.run(one_turn()) == "Hello there."
    assert asyncio.run(one_turn()) == "Hello there."  # a new loop, the same base URL and key
    assert ports[0] == ports[1]
