"""A real vixio server (agent on a scripted LLM server) with a simulated device connected."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import ScriptedLLMServer


@dataclass
class Live:
    llm: ScriptedLLMServer
    server: VixioServer
    device: SimulatedDevice
    http: aiohttp.ClientSession

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.ota.port}"

    @property
    def session_id(self) -> str:
        (session_id,) = self.server.transport.connections
        return session_id

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.http.get(self.base + path, **kwargs) as response:
            return response.status, await response.json()

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        async with self.http.post(self.base + path, json=body, **kwargs) as response:
            return response.status, await response.json()


def config(
    llm: ScriptedLLMServer, tools: dict[str, Any] | None = None, tts: dict[str, Any] | None = None, **http: Any
) -> VixioConfig:
    return VixioConfig.model_validate(
        {
            "tools": tools or {},
            "tts": tts,
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "http": {"host": "127.0.0.1", "port": 0, **http},
                "idle_timeout": 0,
            },
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "t",
                "timeout": 10,
            },
        }
    )


async def wait_for_tool(server: VixioServer, name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(name in [t.source_name for t in tools.tools] for tools in server.tools.values()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never offered")


@pytest.fixture
async def live(llm: ScriptedLLMServer, request: pytest.FixtureRequest) -> AsyncIterator[Live]:
    http_settings = getattr(request, "param", {})
    server = VixioServer(config(llm, **http_settings))
    await server.start()
    try:
        async with SimulatedDevice(
            ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/", listening_mode="manual"
        ) as device:
            await device.connect()
            await wait_for_tool(server, "self.audio_speaker.set_volume")
            async with aiohttp.ClientSession() as http:
                yield Live(llm, server, device, http)
    finally:
        await server.stop()
