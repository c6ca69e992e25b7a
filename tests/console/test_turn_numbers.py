"""A device that reconnects goes on with its conversation, and so do its turn numbers (issue 46:
they restarted at 1, so the console showed "turn 1" twice for one conversation)."""

from __future__ import annotations

import asyncio

import pytest

from tests.console.conftest import Live
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply

pytestmark = pytest.mark.integration


async def _say(live: Live, device: SimulatedDevice, session_id: str, text: str) -> list[dict]:
    mark = device.mark()
    status, _ = await live.post("/api/say", {"session": session_id, "text": text})
    assert status == 200
    await device.wait_for("tts", state="stop", after=mark, timeout=20)
    status, detail = await live.get(f"/api/sessions/{session_id}")
    assert status == 200
    return [t for t in detail["conversation"] if t["heard"]]


async def test_turn_numbers_go_on_after_a_reconnect(live: Live) -> None:
    live.llm.expect(Reply.text("Hello there."), Reply.text("Hello again."))
    (first,) = await _say(live, live.device, live.session_id, "Hi.")
    device_id, port = live.device.device_id, live.server.transport.port
    await live.device.close()
    for _ in range(100):  # the session closes, its last turn is stored
        if not live.server.transport.connections:
            break
        await asyncio.sleep(0.05)
    async with SimulatedDevice(
        ws_url=f"ws://127.0.0.1:{port}/xiaozhi/v1/", device_id=device_id, listening_mode="manual"
    ) as again:
        await again.connect()
        for _ in range(100):
            if live.server.transport.connections:
                break
            await asyncio.sleep(0.05)
        (session_id,) = live.server.transport.connections
        (second,) = await _say(live, again, session_id, "Hi again.")
    assert second["heard"] == ["Hi again."]
    assert second["turn"] == first["turn"] + 1, (first["turn"], second["turn"])
