"""An MCP server's tool called by the agent: scripted model → OpenAIAgentProvider → converter →
ToolExecutor → the stdio weather server → the result in the model's next request."""

from __future__ import annotations

import pytest

from tests.providers.tools.conftest import stdio_config
from vixio.core.tools import ToolExecutor, ToolSet
from vixio.providers.agent.base import AgentTextDelta, AgentToolResult
from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter
from vixio.providers.tools import McpServerPool
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.process


async def test_agent_calls_an_mcp_tool_and_the_model_reads_its_result() -> None:
    pool = McpServerPool({"weather": stdio_config(tools=["get_weather", "forecast"])})
    await pool.start()
    try:
        toolset = ToolSet()
        for key, tools in pool.process_tools().items():
            toolset.set_tools(key, tools)
        converter = OpenAIAgentToolConverter(ToolExecutor(toolset))
        async with ScriptedLLMServer() as server:
            server.expect(
                Reply.tool_call("get_weather", {"city": "Paris"}, call_id="call_w"), Reply.text("It is sunny in Paris.")
            )
            agent = OpenAIAgentProvider("openai/test", api_base=server.base_url, api_key="x")
            await agent.initialize(tools=converter.convert_all(toolset.tools))

            events = [event async for event in agent.chat("What's the weather in Paris?")]

            assert server.tool_names(0) == ["get_weather", "forecast"]
            tool_messages = [m for m in server.messages(1) if m["role"] == "tool"]
            assert tool_messages == [{"role": "tool", "tool_call_id": "call_w", "content": "Paris: Sunny, 21 °C"}]
            assert [e.output for e in events if isinstance(e, AgentToolResult)] == ["Paris: Sunny, 21 °C"]
            assert "".join(e.text for e in events if isinstance(e, AgentTextDelta)) == "It is sunny in Paris."
            server.assert_all_consumed()
    finally:
        await pool.close()
