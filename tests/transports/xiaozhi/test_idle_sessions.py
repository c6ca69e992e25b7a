"""Connected-idle devices: a silent session holds no Opus state until audio flows its way.

Most devices of a fleet sit connected and silent between conversations; libopus' decoder
(~22 KB) and encoder (~38 KB) were a third of such a session's memory (bench/bench_idle.py).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vixio.testing.device import SimulatedDevice

from .conftest import ws_url

pytestmark = pytest.mark.integration


async def _tools_listed(device: SimulatedDevice, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not any(r.get("method") == "tools/list" for r in device.mcp_requests if isinstance(r, dict)):
            await asyncio.sleep(0.02)


async def test_silent_devices_hold_no_opus_state_until_audio_flows(make_server) -> None:
    server = await make_server(reply_seconds=0.6)
    url = ws_url(server)
    devices = [SimulatedDevice(ws_url=url, device_id=f"02:00:00:00:aa:{i:02x}") for i in range(8)]
    for device in devices:
        await device.__aenter__()
    try:
        for device in devices:
            await device.connect()
        await asyncio.gather(*(_tools_listed(d) for d in devices))
        await asyncio.sleep(0.3)  # hello, MCP initialize and tools/list answered; then silence
        connections = list(server.transport.connections.values())
        assert len(connections) == len(devices)
        assert all(c._decoder is None and c.downlink._encoder is None for c in connections)

        talker = devices[0]
        talking = next(c for c in connections if c.device_id == talker.device_id)
        await talker.start_listening("auto")
        mark = talker.mark()
        await talker.send_text("hi")  # a typed turn: a reply goes down, no audio came up
        await talker.wait_for("tts", state="stop", after=mark, timeout=5)
        await talker.wait_until_idle(timeout=5)
        assert talker.decoded_audio()  # the lazily made encoder encoded real Opus
        assert talking.downlink._encoder is not None and talking._decoder is None

        await talker.start_listening("auto")
        noise = np.random.default_rng(3).normal(0, 300, 16000 // 2).astype("<i2").tobytes()
        assert await talker.stream_audio(noise) > 0
        async with asyncio.timeout(5):
            while talking.audio_frames_in == 0:
                await asyncio.sleep(0.02)
        assert talking._decoder is not None
        others = [c for c in connections if c is not talking]
        assert all(c._decoder is None and c.downlink._encoder is None for c in others)
    finally:
        for device in devices:
            await device.__aexit__(None, None, None)
