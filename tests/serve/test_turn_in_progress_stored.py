"""The turn in progress survives the worker: killed with SIGKILL mid-reply, or cut off by the
SIGTERM drain's deadline, the question and the reply so far (the sentences the device was given)
are in the history, marked interrupted, as a reply the device aborted would be. Real `vixio serve`
(two workers), a simulated device, the scripted LLM on loopback streaming a long reply, espeak,
the SQLite store; the history read back through the console's API."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

DEVICE = "02:00:00:00:7e:01"
QUESTION = "tell me a long story"
LONG_REPLY = " ".join(f"This is sentence number {n} of a long story." for n in range(1, 41))


async def history(serve: ServeProcess) -> list[dict[str, Any]]:
    """The device's stored turns, as the console lists them (oldest first)."""
    async with aiohttp.ClientSession() as http, http.get(f"{serve.base_url}/api/devices/{DEVICE}") as response:
        assert response.status == 200, await response.text()
        return list((await response.json())["turns"])


async def ask_and_hear(serve: ServeProcess, llm: ScriptedLLMServer, device: SimulatedDevice, sentences: int) -> None:
    """Ask for the long story; return once the device has been given `sentences` sentences of it."""
    await device.connect()
    llm.expect(Reply.text(LONG_REPLY, delta_delay=0.03))  # streams for ~10 s
    mark = device.mark()
    await device.send_text(QUESTION)

    async def given() -> bool:
        return (
            sum(1 for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start")
            >= sentences
        )

    await until(given, 60, f"{sentences} sentences of the reply")


def assert_partial(turns: list[dict[str, Any]]) -> None:
    assert len(turns) == 1, turns
    [turn] = turns
    assert turn["user"] == QUESTION and turn["interrupted"] is True, turn
    # The sentences the device was given (the one being written when the worker died may be missing).
    assert turn["assistant"].startswith("This is sentence number 1 of a long story."), turn
    assert LONG_REPLY.startswith(turn["assistant"]) and len(turn["assistant"]) < len(LONG_REPLY), turn


async def test_a_worker_killed_mid_reply_leaves_the_question_and_the_reply_so_far(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    serve = await start_serve(tmp_path, llm, "--workers", "2")
    try:
        await serve.wait_ready()
        started = re.search(r"starting 2 workers \(pids (\d+), (\d+)\)", serve.text())
        assert started, serve.text()
        async with SimulatedDevice(ota_url=serve.ota_url, device_id=DEVICE) as device:
            await ask_and_hear(serve, llm, device, sentences=3)
            await asyncio.sleep(0.5)  # the SQLite thread commits what was written
            for pid in (int(started[1]), int(started[2])):  # kill -9 whichever holds the device
                os.kill(pid, signal.SIGKILL)
            await device.wait_closed(timeout=30)
        await until(
            lambda: asyncio.sleep(0.25, serve.text().count("restarted (pid") == 2), 120, "both workers restarted"
        )
        assert_partial(await history(serve))
    finally:
        serve.kill_group()


async def test_a_reply_cut_off_by_the_drain_deadline_is_stored_as_interrupted(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    serve = await start_serve(tmp_path, llm, "--workers", "2", server="drain_timeout: 1")
    try:
        await serve.wait_ready()
        async with SimulatedDevice(ota_url=serve.ota_url, device_id=DEVICE) as device:
            await ask_and_hear(serve, llm, device, sentences=2)
            serve.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(serve.process.wait(), 60) == 0
            await device.wait_closed(timeout=10)
        assert "drain: 1 reply still running after 1 s" in serve.text(), serve.text()
    finally:
        serve.kill_group()
    (tmp_path / "serve.log").rename(tmp_path / "first.log")
    again = await start_serve(tmp_path, None, "--workers", "1")  # the same folder: the same store
    try:
        await again.wait_ready()
        assert_partial(await history(again))
    finally:
        await again.stop()
