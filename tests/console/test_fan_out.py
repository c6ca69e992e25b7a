"""One console over two servers' sessions (the shape of `vixio serve --workers`): FanOutBackend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.console.conftest import config, wait_for_tool
from vixio.app.server import VixioServer
from vixio.console import FanOutBackend
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration


@pytest.fixture
async def two(llm: ScriptedLLMServer) -> AsyncIterator[tuple[VixioServer, VixioServer]]:
    first, second = VixioServer(config(llm)), VixioServer(config(llm))
    await first.start()
    await second.start()
    try:
        yield first, second
    finally:
        await first.stop()
        await second.stop()


async def test_one_console_sees_and_drives_both(two: tuple[VixioServer, VixioServer], llm: ScriptedLLMServer) -> None:
    first, second = two
    first.console.use_backend(FanOutBackend(lambda: [first.console.local, second.console.local]))
    base = f"http://127.0.0.1:{first.ota.port}"
    async with (
        SimulatedDevice(ws_url=f"ws://127.0.0.1:{first.transport.port}/", listening_mode="manual") as here,
        SimulatedDevice(ws_url=f"ws://127.0.0.1:{second.transport.port}/", listening_mode="manual") as there,
        aiohttp.ClientSession() as http,
    ):
        await here.connect()
        await there.connect()
        await wait_for_tool(first, "self.audio_speaker.set_volume")
        await wait_for_tool(second, "self.audio_speaker.set_volume")
        (remote,) = second.transport.connections

        async with http.get(base + "/api/sessions") as response:
            listed = (await response.json())["sessions"]
        assert {s["device_id"] for s in listed} == {here.device_id, there.device_id}

        async with http.get(base + f"/api/tools?session={remote}") as response:
            assert "self.audio_speaker.set_volume" in [t["original_name"] for t in (await response.json())["tools"]]
        async with http.post(
            base + "/api/execute",
            json={"session": remote, "tool": "self_audio_speaker_set_volume", "arguments": {"volume": 30}},
        ) as response:
            assert (await response.json())["success"]
        assert there.status.volume == 30 and here.status.volume != 30

        llm.expect(Reply.text("Hello from the second server."))
        mark = there.mark()
        async with http.post(base + "/api/say", json={"session": remote, "text": "hello"}) as response:
            assert response.status == 200
        await there.wait_for("tts", state="stop", after=mark, timeout=20)
        async with http.get(base + f"/api/sessions/{remote}") as response:
            detail = await response.json()
        assert detail["device_id"] == there.device_id
        assert detail["conversation"][-1]["said"] == ["Hello from the second server."]
        assert [c["arguments"] for c in detail["console_calls"]] == [{"volume": 30}]

        async with http.get(base + "/api/sessions/nope") as response:
            assert response.status == 404
        async with http.post(base + "/api/execute", json={"tool": "get_time"}) as response:
            assert (await response.json())["success"]
