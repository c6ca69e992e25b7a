"""Ctrl-C while a device is hearing a reply: the reply ends with `tts stop` and nothing starts
after it; SIGTERM (the graceful stop): the reply plays to its end first — `vixio serve` in its own process group, one process and two workers, a simulated
device, an agent over a scripted LLM on loopback, espeak for speech."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve

pytestmark = pytest.mark.process

LONG_REPLY = " ".join(f"This is sentence number {n} of a long story." for n in range(1, 41))


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_ctrl_c_mid_reply_stops_it_and_starts_nothing_after(
    tmp_path: Path, llm: ScriptedLLMServer, workers: str
) -> None:
    if workers != "1" and not reuse_port_supported():
        pytest.skip("workers are Linux only")
    serve = await start_serve(tmp_path, llm, "--workers", workers)
    try:
        ota_url = await serve.wait_ready()
        async with SimulatedDevice(ota_url=ota_url) as device:
            await device.connect()
            llm.expect(Reply.text(LONG_REPLY, delta_delay=0.03))  # the model is still streaming at Ctrl-C
            mark = device.mark()
            await device.send_text("tell me a long story")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=60)
            os.killpg(serve.process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
            assert await asyncio.wait_for(serve.process.wait(), 60) == 0
            await device.wait_closed(timeout=10)
        states = [m.data.get("state") for m in device.received[mark:] if m.type == "tts"]
        assert states[0] == "start" and "stop" in states, states
        assert states.index("stop") == len(states) - 1, f"after tts stop the device got {states}"
        assert states.count("sentence_start") < 40  # it was cut off
        assert "Traceback" not in serve.text()
    finally:
        serve.kill_group()


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_sigterm_mid_reply_lets_the_reply_finish_then_closes(
    tmp_path: Path, llm: ScriptedLLMServer, workers: str
) -> None:
    # What `docker stop` and Kubernetes send: the HTTP port closes at once (health checks fail),
    # the reply the device is hearing plays to its end, then the session closes.
    if workers != "1" and not reuse_port_supported():
        pytest.skip("workers are Linux only")
    import aiohttp

    story = " ".join(f"This is sentence number {n} of a short story." for n in range(1, 6))
    serve = await start_serve(tmp_path, llm, "--workers", workers)
    try:
        ota_url = await serve.wait_ready()
        async with SimulatedDevice(ota_url=ota_url) as device:
            await device.connect()
            llm.expect(Reply.text(story, delta_delay=0.05))  # the model is still streaming at SIGTERM
            mark = device.mark()
            await device.send_text("tell me a short story")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=60)
            serve.process.send_signal(signal.SIGTERM)

            async def healthz_refused() -> bool:
                try:
                    async with aiohttp.ClientSession() as http, http.get(serve.base_url + "/healthz") as response:
                        return response.status != 200
                except aiohttp.ClientError:
                    return True

            for _ in range(100):
                if await healthz_refused():
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("/healthz still answered 200 five seconds after SIGTERM")
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            assert await asyncio.wait_for(serve.process.wait(), 60) == 0
            await device.wait_closed(timeout=10)
        states = [m.data.get("state") for m in device.received[mark:] if m.type == "tts"]
        assert states.count("sentence_start") == 5, states  # the whole reply was heard
        assert states.index("stop") == len(states) - 1, f"after tts stop the device got {states}"
        assert "draining: 1 reply being made or spoken" in serve.text()
        assert "Traceback" not in serve.text()
    finally:
        serve.kill_group()
