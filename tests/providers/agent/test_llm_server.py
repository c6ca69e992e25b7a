"""ScriptedLLMServer speaks enough of the OpenAI API for real clients, and fails loudly."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from vixio.testing.llm_server import Reply, ScriptedLLMServer, ScriptedToolCall

pytestmark = pytest.mark.integration


async def post(server: ScriptedLLMServer, body: dict[str, Any]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.post(f"{server.base_url}/chat/completions", json=body) as response:
        return response.status, await response.text()


def sse_payloads(text: str) -> list[Any]:
    lines = [line.removeprefix("data: ") for line in text.split("\n\n") if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


async def test_streamed_tool_calls_arrive_in_fragments(server: ScriptedLLMServer) -> None:
    server.expect(Reply.tool_calls(ScriptedToolCall("a", {"x": 1}, "id_a"), ScriptedToolCall("b", "{bad json")))
    status, text = await post(
        server, {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    )
    assert status == 200
    payloads = sse_payloads(text)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    calls = [tc for c in chunks for choice in c["choices"] for tc in choice["delta"].get("tool_calls", [])]
    assert calls[0]["id"] == "id_a" and calls[0]["function"]["name"] == "a"
    args_a = "".join(tc["function"]["arguments"] for tc in calls if tc["index"] == 0)
    args_b = "".join(tc["function"]["arguments"] for tc in calls if tc["index"] == 1)
    assert (json.loads(args_a), args_b) == ({"x": 1}, "{bad json")
    assert sum(1 for tc in calls if tc["index"] == 0) >= 3  # head + several argument fragments
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] > 0
    server.assert_all_consumed()


async def test_non_streamed_answer(server: ScriptedLLMServer) -> None:
    server.expect(Reply.tool_call("lamp", {"on": True}, call_id="c1", text="Switching."))
    status, text = await post(server, {"model": "m", "messages": [{"role": "user", "content": "on"}]})
    body = json.loads(text)
    assert status == 200
    message = body["choices"][0]["message"]
    assert message["content"] == "Switching."
    assert message["tool_calls"][0]["function"] == {"name": "lamp", "arguments": '{"on": true}'}
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert server.requests[0]["messages"][0]["content"] == "on"


async def test_unexpected_request_fails_loudly(server: ScriptedLLMServer) -> None:
    status, text = await post(server, {"model": "m", "messages": [{"role": "user", "content": "extra"}]})
    assert status == 500 and "no scripted reply left" in text
    assert len(server.errors) == 1
    with pytest.raises(AssertionError, match="no scripted reply left"):
        server.assert_all_consumed()


async def test_failed_check_and_unused_replies_are_reported(server: ScriptedLLMServer) -> None:
    def wants_tools(body: dict[str, Any]) -> None:
        assert body.get("tools"), "request offered no tools"

    server.expect(Reply.text("hi", check=wants_tools), Reply.text("never asked for"))
    status, text = await post(server, {"model": "m", "messages": []})
    assert status == 500 and "request offered no tools" in text
    with pytest.raises(AssertionError, match="1 scripted repl"):
        server.assert_all_consumed()


async def test_error_status_and_unknown_route(server: ScriptedLLMServer) -> None:
    server.expect(Reply.error(429, "slow down"))
    status, text = await post(server, {"model": "m", "messages": []})
    assert status == 429 and json.loads(text)["error"]["message"] == "slow down"
    async with aiohttp.ClientSession() as http, http.get(f"{server.base_url}/models") as response:
        assert response.status == 404
    assert server.errors == ["unexpected route GET /v1/models"]


async def test_stop_releases_a_hanging_request() -> None:
    server = await ScriptedLLMServer(Reply.hang()).start()
    async with aiohttp.ClientSession() as http:
        pending = http.post(f"{server.base_url}/chat/completions", json={"messages": []})
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.1)
        await asyncio.wait_for(server.stop(), 2.0)
        response = await asyncio.wait_for(task, 2.0)
        assert response.status == 503
        response.release()
