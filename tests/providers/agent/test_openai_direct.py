"""`openai/...` models: the openai SDK directly (default) and through litellm give the same turn."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from vixio.providers.agent.base import AgentTextDelta, AgentToolCall, AgentToolResult
from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.process


async def _turns(server: ScriptedLLMServer, *, direct: bool) -> list[tuple[str, str]]:
    from agents import function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    provider = OpenAIAgentProvider("openai/test-model", api_base=server.base_url, api_key="test", openai_direct=direct)
    await provider.initialize(tools=[get_weather], system_prompt="Be brief.")
    server.expect(Reply.tool_call("get_weather", {"city": "Paris"}), Reply.text("It is sunny in Paris today."))
    events = []
    async for event in provider.chat("Weather in Paris?"):
        if isinstance(event, AgentTextDelta):
            events.append(("text", event.text))
        elif isinstance(event, AgentToolCall):
            events.append(("call", event.name))
        elif isinstance(event, AgentToolResult):
            events.append(("result", event.output))
    return events


async def test_direct_and_litellm_paths_give_the_same_turn() -> None:
    async with ScriptedLLMServer() as direct_server, ScriptedLLMServer() as litellm_server:
        direct = await _turns(direct_server, direct=True)
        through_litellm = await _turns(litellm_server, direct=False)
        assert direct == through_litellm
        assert "".join(text for kind, text in direct if kind == "text") == "It is sunny in Paris today."
        for server in (direct_server, litellm_server):
            server.assert_all_consumed()
        # What the model saw after the tool (litellm leaves out `"content": null` beside tool calls).
        assert _without_nulls(direct_server.messages(1)) == _without_nulls(litellm_server.messages(1))


def _without_nulls(messages: list[dict]) -> list[dict]:
    return [{key: value for key, value in message.items() if value is not None} for message in messages]


def test_the_direct_path_never_imports_litellm() -> None:
    script = textwrap.dedent("""
        import asyncio, sys
        from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
        from vixio.testing.llm_server import Reply, ScriptedLLMServer

        async def main():
            async with ScriptedLLMServer() as server:
                server.expect(Reply.text("Hello there."))
                provider = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
                await provider.initialize()
                text = "".join([e.text async for e in provider.chat("hi") if hasattr(e, "text")])
                assert text == "Hello there.", text
        asyncio.run(main())
        print("litellm" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
