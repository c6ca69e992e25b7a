"""A model's tool-call mistakes are WARNINGs, throttled per session (issue 25 §5).

A real server, a simulated device, an openai-agents Agent over litellm against the scripted LLM
server: the model calls a tool that does not exist eight times, then a real tool with unreadable
and invalid arguments eight times. Each call is still answered to the model (it then replies),
and the log holds at most five WARNING lines per kind and session, no INFO line for them.
"""

from __future__ import annotations

from typing import Any

import pytest
from loguru import logger

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer, ScriptedToolCall

pytestmark = pytest.mark.integration

CALLS = 8


async def test_unknown_tools_and_bad_arguments_are_throttled_warnings(llm: ScriptedLLMServer) -> None:
    records: list[dict[str, Any]] = []
    sink = logger.add(lambda message: records.append(message.record), level="DEBUG", filter="vixio")
    server = VixioServer(
        VixioConfig.model_validate(
            {
                "xiaozhi": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "http": {"host": "127.0.0.1", "port": 0},
                    "idle_timeout": 0,
                },
                "agent": {
                    "provider": "litellm",
                    "model": "openai/test-model",
                    "api_base": llm.base_url,
                    "api_key": "t",
                    "timeout": 20,
                },
                "tools": {"builtin": ["get_time"]},
            }
        )
    )
    await server.start()

    def told(body: dict[str, Any]) -> None:
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        assert len(results) == 2 * CALLS and all(result.startswith("Error") for result in results), results

    llm.expect(
        Reply.tool_calls(*(ScriptedToolCall("open_garage", {"door": i}) for i in range(CALLS))),
        Reply.tool_calls(*(ScriptedToolCall("get_time", "{not json" if i % 2 else {"zone": i}) for i in range(CALLS))),
        Reply.text("I could not do that.", check=told),
    )
    try:
        async with SimulatedDevice(ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/") as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("open the garage")
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
        llm.assert_all_consumed()
    finally:
        await server.stop()
        logger.remove(sink)

    def lines(level: str, needle: str) -> list[str]:
        return [r["message"] for r in records if r["level"].name == level and needle in r["message"]]

    unknown = lines("WARNING", "which is not one of its")
    assert len(unknown) == 5 and "'open_garage'" in unknown[0], unknown
    refused = lines("WARNING", "tool call get_time refused")
    assert len(refused) == 5, refused
    assert any("not valid JSON" in line for line in refused) and any("zone" in line for line in refused), refused
    assert lines("INFO", "which is not one of its") == [] and lines("INFO", "tool get_time") == []
    assert [r for r in records if r["level"].name == "ERROR" or r["exception"] is not None] == []
