"""OpenAIAgentToolConverter: vixio tools as openai-agents FunctionTools, run by the executor."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from vixio.core.tools import (
    ToolCallResult,
    ToolDefinition,
    ToolExecutor,
    ToolPolicy,
    ToolSet,
)
from vixio.providers.agent.base import AgentTextDelta, AgentToolCall, AgentToolResult
from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration

Factory = Callable[..., Any]
VOLUME = {
    "type": "object",
    "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["volume"],
}


class Device:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        self.calls.append((name, arguments))
        return ToolCallResult.ok("true")


def session(policy: ToolPolicy | None = None) -> tuple[ToolExecutor, OpenAIAgentToolConverter, Device]:
    device = Device()
    toolset = ToolSet(policy or ToolPolicy())
    toolset.set_tools(
        "device",
        [
            ToolDefinition(
                "self.audio_speaker.set_volume",
                "Set the volume; check self.get_device_status first.",
                VOLUME,
                source="device",
                client=device,
            ),
            ToolDefinition("self.get_device_status", "Device status.", source="device", client=device),
        ],
    )
    executor = ToolExecutor(toolset)
    return executor, OpenAIAgentToolConverter(executor), device


async def test_sanitized_name_string_argument_and_result_round_trip(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    executor, converter, device = session()
    server.expect(
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": "30"}, call_id="call_v"),
        Reply.text("Done, the volume is now 30."),
    )
    agent = make_provider()
    await agent.initialize(tools=converter.convert_all(executor.toolset.tools))
    events = [e async for e in agent.chat("volume 30 please")]

    assert device.calls == [("self.audio_speaker.set_volume", {"volume": 30})]
    assert AgentToolResult("call_v", "self_audio_speaker_set_volume", "true") in events
    assert "".join(e.text for e in events if isinstance(e, AgentTextDelta)) == "Done, the volume is now 30."
    tools = server.requests[0]["tools"]
    assert [t["function"]["name"] for t in tools] == ["self_audio_speaker_set_volume", "self_get_device_status"]
    assert "self_get_device_status first" in tools[0]["function"]["description"]
    assert tools[0]["function"]["parameters"]["properties"]["volume"]["type"] == "integer"
    body = json.dumps(server.requests[0], ensure_ascii=True)
    assert "self.audio_speaker" not in body
    tool_message = [m for m in server.messages(1) if m["role"] == "tool"]
    assert tool_message == [{"role": "tool", "tool_call_id": "call_v", "content": "true"}]
    assert executor.context.get("call_v") is not None
    server.assert_all_consumed()


async def test_bad_arguments_go_back_to_the_model_not_to_the_device(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    executor, converter, device = session()
    server.expect(
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": "loud"}, call_id="c"),
        Reply.text("Sorry, what volume?"),
    )
    agent = make_provider()
    await agent.initialize(tools=converter.convert_all(executor.toolset.tools))
    events = [e async for e in agent.chat("make it loud")]
    result = next(e for e in events if isinstance(e, AgentToolResult))
    assert result.output.startswith("Error: self_audio_speaker_set_volume: invalid arguments")
    assert device.calls == []
    server.assert_all_consumed()


async def test_max_iterations_then_the_model_answers_without_tools(
    server: ScriptedLLMServer, make_provider: Factory
) -> None:
    executor, converter, device = session()
    server.expect(
        Reply.tool_call("self_get_device_status", {}),
        Reply.tool_call("self_get_device_status", {}),
        Reply.text("Your device is fine."),
    )
    agent = make_provider(max_tool_iterations=2)
    await agent.initialize(tools=converter.convert_all(executor.toolset.tools))
    events = [e async for e in agent.chat("status?")]
    assert sum(isinstance(e, AgentToolCall) for e in events) == 2
    assert len(server.tool_names(0)) == 2 and len(server.tool_names(1)) == 2
    assert server.tool_names(2) == []  # the third model call gets no tools
    assert len(device.calls) == 2
    server.assert_all_consumed()


async def test_plain_function_becomes_a_framework_function_tool() -> None:
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    tool = OpenAIAgentToolConverter().convert_local_tool(shout)
    assert tool.name == "shout" and tool.params_json_schema["required"] == ["text"]
