"""Warm-ups through `vixio serve` as an operator runs it (one worker and two): a device's hello
opens a connection to each cloud API before the user says anything, and the turn that follows
is carried on those connections."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.providers.test_prewarm import Recorder
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.serve import start_serve, until

pytestmark = pytest.mark.process

HEADS = [("HEAD", "/v1/audio/speech"), ("HEAD", "/v1/audio/transcriptions"), ("HEAD", "/v1/chat/completions")]


def _voice(base_url: str, prewarm: bool = True) -> str:
    return f"""
pipeline: {{prewarm: {str(prewarm).lower()}}}
memory: {{enabled: false}}
vad: {{provider: silero-onnx}}
asr: {{provider: openai, api_base: "{base_url}", api_key: k}}
agent: {{provider: litellm, model: openai/m, api_base: "{base_url}", api_key: k, timeout: 20}}
tts: {{provider: openai, api_base: "{base_url}", api_key: k, fallback: null}}
"""


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_devices_hello_warms_the_apis_its_first_turn_then_uses(tmp_path: Path, workers: int) -> None:
    if workers > 1 and not reuse_port_supported():
        pytest.skip("workers are Linux only")
    async with Recorder() as apis, AsyncExitStack() as stack:
        serve = await start_serve(tmp_path, None, "--workers", str(workers), extra=_voice(apis.base_url))
        stack.callback(serve.kill_group)
        ota_url = await serve.wait_ready()
        await until(lambda: _quiet(apis), 30, "the ready check's warm-ups")
        before = len(apis.requests)
        device = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url, mcp=False))
        await device.connect()

        async def warmed() -> bool:
            return sorted(apis.methods()[before:]) == HEADS

        await until(warmed, 15, "a HEAD to each API after the hello")
        warm_ports = {port for method, _, port in apis.requests[before:]}
        mark = device.mark()
        await device.send_text("hello there")
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        turn = [(method, path, port) for method, path, port in apis.requests[before:] if method == "POST"]
        assert [path for _, path, _ in turn] == ["/v1/chat/completions", "/v1/audio/speech"]
        # Both requests went out on connections the warm-ups had opened: no connect on the way.
        assert {port for _, _, port in turn} <= warm_ports
        await serve.stop()


async def test_with_prewarm_off_the_first_turn_opens_its_own_connections(tmp_path: Path) -> None:
    async with Recorder() as apis, AsyncExitStack() as stack:
        serve = await start_serve(tmp_path, None, extra=_voice(apis.base_url, prewarm=False))
        stack.callback(serve.kill_group)
        ota_url = await serve.wait_ready()
        device = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url, mcp=False))
        await device.connect()
        mark = device.mark()
        await device.send_text("hello there")
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        assert [method for method, _ in apis.methods()] == ["POST", "POST"]
        await serve.stop()


async def _quiet(apis: Recorder) -> bool:
    """No new request for half a second (the start-up's own sessions are done warming)."""
    import asyncio

    count = len(apis.requests)
    await asyncio.sleep(0.5)
    return len(apis.requests) == count
