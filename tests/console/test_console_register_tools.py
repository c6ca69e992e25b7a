"""registerTools tools in the console: listed as the session's, run through the executor."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.console.conftest import config
from vixio.app.server import VixioServer
from vixio.testing.llm_server import ScriptedLLMServer
from vixio.testing.register_client import ClientTool, RegisterClient

pytestmark = pytest.mark.integration


async def test_register_tools_are_listed_and_run(llm: ScriptedLLMServer) -> None:
    async def weather(args: dict[str, Any]) -> dict[str, Any]:
        return {"city": args.get("city"), "weather": "sunny"}

    async def lamp(args: dict[str, Any]) -> dict[str, Any]:
        return {"status": "success", "message": f"lamp {args['on']}"}

    tools = [
        ClientTool(
            "get_weather", "Weather of a city", {"type": "object", "properties": {"city": {"type": "string"}}}, weather
        ),
        ClientTool(
            "set_lamp",
            "Switch the lamp",
            {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]},
            lamp,
            sub_type="control",
        ),
    ]
    server = VixioServer(config(llm))
    await server.start()
    try:
        async with (
            RegisterClient(f"ws://127.0.0.1:{server.transport.port}/", tools) as client,
            aiohttp.ClientSession() as http,
        ):
            await client.register()
            assert client.server_hello is not None
            session = client.server_hello["session_id"]
            base = f"http://127.0.0.1:{server.ota.port}"
            for _ in range(200):
                async with http.get(f"{base}/api/tools?session={session}") as response:
                    # 404 until the registration has made its session's tool list
                    listed = {t["original_name"]: t for t in (await response.json()).get("tools", [])}
                if "set_lamp" in listed:
                    break
                await asyncio.sleep(0.02)
            assert listed["set_lamp"]["source"] == "register" and listed["set_lamp"]["scope"] == "session"
            assert listed["set_lamp"]["sub_type"] == "control" and listed["get_weather"]["sub_type"] == "query"

            async with http.post(
                f"{base}/api/execute", json={"session": session, "tool": "get_weather", "arguments": {"city": "Paris"}}
            ) as response:
                body = await response.json()
            assert body["success"] and '"weather":"sunny"' in body["result"].replace(" ", "")
            # A control tool is answered at once, as the model is; the client still runs it.
            async with http.post(
                f"{base}/api/execute", json={"session": session, "tool": "set_lamp", "arguments": {"on": "true"}}
            ) as response:
                body = await response.json()
            assert body["success"] and body["result"] == "success" and body["arguments"] == {"on": True}
            execution = await client.wait_for_execution("set_lamp")
            assert execution.tool_input == {"on": True}
    finally:
        await server.stop()
