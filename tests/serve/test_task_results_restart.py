"""A background result held for a device that is away lives in the state store: it survives the
death of the worker that held the session and a restart of the whole server, and is delivered
once, on whichever worker the device comes back to (vixio/app/task_results.py). Real processes, real
WebSockets, a real SQLite file, the scripted model on loopback, espeak.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.fleet.test_workers_companions import start, worker_of
from tests.serve.test_workers_task_results import SLOW_TOOL, V_MAC, _gone, _logged
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

KEPT = "finished while the device is away: kept 10 min"


def _held(state: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(state) as connection:
        return connection.execute("SELECT device_id, payload FROM held_results ORDER BY id").fetchall()


async def test_a_held_result_outlives_a_worker_death_and_a_server_restart(tmp_path: Path) -> None:
    tool = tmp_path / "slow_tools.py"
    tool.write_text(SLOW_TOOL, encoding="utf-8")
    state = tmp_path / "state.db"
    extra = f"""
state: {{path: {state}}}
tools:
  local:
    - {{function: "{tool}:slow_lookup", async: true}}
"""
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, base = await start(tmp_path, llm=llm, extra=extra)
    devices: list[SimulatedDevice] = []

    async def connect(url: str) -> SimulatedDevice:
        device = SimulatedDevice(ws_url=url, device_id=V_MAC, listening_mode="manual", mcp=False)
        devices.append(device)
        await device.__aenter__()
        await device.connect()
        return device

    try:
        # The device starts a slow lookup on w0 and leaves; the result is held in the store.
        v = await connect(ws_url)
        assert (await worker_of(base, V_MAC))[0] == 0
        llm.expect(Reply.tool_call("slow_lookup", {"topic": "tea"}), Reply.text("Let me look that up."))
        mark = v.mark()
        await v.send_text("look up tea in the archive")
        await v.wait_for("tts", state="stop", after=mark, timeout=30)
        await v.__aexit__(None, None, None)
        await until(lambda: _gone(base, V_MAC), 10, "the device's session to end")
        await until(lambda: _logged(serve.text(), KEPT), 20, "the result to be held")
        [(device_id, payload)] = _held(state)
        assert device_id == V_MAC and json.loads(payload)["result"] == "tea: 42"

        # The worker that ran it dies and is replaced: the result is not in its memory.
        workers = {line["worker"]: line for line in (await serve.metrics())["workers"]}
        os.kill(workers[0]["pid"], signal.SIGKILL)

        async def replaced() -> bool:
            lines = {line["worker"]: line for line in (await serve.metrics())["workers"]}
            return lines[0]["status"] == "up" and lines[0]["pid"] != workers[0]["pid"]

        await until(replaced, 180, "worker 0 to be restarted")

        # And the whole server stops and starts again on the same file.
        serve.process.send_signal(signal.SIGTERM)
        assert await serve.process.wait() == 0, serve.text()
        assert len(_held(state)) == 1
        (tmp_path / "serve.log").rename(tmp_path / "serve-1.log")
        serve, ws_url, base = await start(tmp_path, llm=llm, extra=extra)

        llm.expect(Reply.text("The archive says tea is 42."))
        v = await connect(ws_url)
        start_of = await v.wait_for("tts", state="sentence_start", timeout=30)
        assert start_of["text"] == "The archive says tea is 42."
        assert "tea: 42" in json.dumps(llm.messages(2))
        await v.wait_for("tts", state="stop", timeout=30)
        assert _held(state) == []  # taken once

        # Back again: nothing is told twice.
        await v.__aexit__(None, None, None)
        await until(lambda: _gone(base, V_MAC), 10, "the device's session to end")
        v = await connect(ws_url)
        await worker_of(base, V_MAC)
        llm.expect(Reply.text("Hello again."))
        mark = v.mark()
        await v.send_text("hello")
        assert (await v.wait_for("tts", state="sentence_start", after=mark, timeout=30))["text"] == "Hello again."
        llm.assert_all_consumed()
    finally:
        for device in devices:
            await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()
    assert "Traceback" not in serve.text()


async def test_with_memory_off_nothing_is_held(tmp_path: Path) -> None:
    tool = tmp_path / "slow_tools.py"
    tool.write_text(SLOW_TOOL, encoding="utf-8")
    state = tmp_path / "state.db"
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, base = await start(
        tmp_path,
        llm=llm,
        workers=1,
        extra=f"""
state: {{path: {state}}}
memory: {{enabled: false}}
tools:
  local:
    - {{function: "{tool}:slow_lookup", async: true}}
""",
    )
    v = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, listening_mode="manual", mcp=False)
    try:
        await v.__aenter__()
        await v.connect()
        llm.expect(Reply.tool_call("slow_lookup", {"topic": "tea"}), Reply.text("Looking."))
        mark = v.mark()
        await v.send_text("look up tea")
        await v.wait_for("tts", state="stop", after=mark, timeout=30)
        await v.__aexit__(None, None, None)
        await until(
            lambda: _logged(serve.text(), "finished while the device is away: result dropped"),
            20,
            "the result to be dropped",
        )
        assert _held(state) == []
    finally:
        await v.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()


async def test_a_result_past_memory_resume_minutes_is_not_told(tmp_path: Path) -> None:
    tool = tmp_path / "slow_tools.py"
    tool.write_text(SLOW_TOOL, encoding="utf-8")
    state = tmp_path / "state.db"
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, _ = await start(
        tmp_path,
        llm=llm,
        workers=1,
        extra=f"""
state: {{path: {state}}}
memory: {{resume_minutes: 0.05}}
tools:
  local:
    - {{function: "{tool}:slow_lookup", async: true}}
""",
    )
    v = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, listening_mode="manual", mcp=False)
    try:
        await v.__aenter__()
        await v.connect()
        llm.expect(Reply.tool_call("slow_lookup", {"topic": "tea"}), Reply.text("Let me look that up."))
        mark = v.mark()
        await v.send_text("look up tea in the archive")
        await v.wait_for("tts", state="stop", after=mark, timeout=30)
        await v.__aexit__(None, None, None)
        await until(
            lambda: _logged(serve.text(), "finished while the device is away: kept 0.05 min"),
            20,
            "the result to be held",
        )
        assert len(_held(state)) == 1
        await asyncio.sleep(3.5)  # past the 3 s it is held for
        v = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, listening_mode="manual", mcp=False)
        await v.__aenter__()
        await v.connect()
        llm.expect(Reply.text("Hello."))
        mark = v.mark()
        await v.send_text("hello")
        assert (await v.wait_for("tts", state="sentence_start", after=mark, timeout=30))["text"] == "Hello."
        assert "tea: 42" not in json.dumps(llm.messages())
        assert len(llm.requests) == 3 and _held(state) == []  # taken (and dropped) at the session's start
        llm.assert_all_consumed()
    finally:
        await v.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()
