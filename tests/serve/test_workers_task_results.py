"""A background (async) tool's result reaches its device after the device reconnected onto the
other worker of `vixio serve --workers 2` (vixio/app/task_results.py): real processes, real
WebSockets, the scripted model on loopback, espeak.

Placement is deterministic: the supervisor hands each connection to the worker with the fewest,
the lower index on a tie.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.fleet.test_workers_companions import api, start, worker_of
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

V_MAC = "aa:bb:cc:dd:ee:01"
SLOW_TOOL = '''
import asyncio


async def slow_lookup(topic: str, seconds: float = 2.0) -> str:
    """Looks a topic up in the slow archive."""
    await asyncio.sleep(seconds)
    return f"{topic}: 42"
'''


async def test_results_reach_the_device_back_on_the_other_worker(tmp_path: Path) -> None:
    tool = tmp_path / "slow_tools.py"
    tool.write_text(SLOW_TOOL, encoding="utf-8")
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, base = await start(
        tmp_path,
        llm=llm,
        extra=f"""
tools:
  local:
    - {{function: "{tool}:slow_lookup", async: true}}
""",
    )
    devices: list[SimulatedDevice] = []

    async def connect(device_id: str = "") -> SimulatedDevice:
        device = SimulatedDevice(
            ws_url=ws_url, listening_mode="manual", mcp=False, **({"device_id": device_id} if device_id else {})
        )
        devices.append(device)
        await device.__aenter__()
        await device.connect()
        await worker_of(base, device.device_id)
        return device

    try:
        v = await connect(V_MAC)
        await connect()  # w1
        await connect()  # w0 (a tie)
        assert (await worker_of(base, V_MAC))[0] == 0

        llm.expect(Reply.tool_call("slow_lookup", {"topic": "tea"}), Reply.text("Let me look that up."))
        mark = v.mark()
        await v.send_text("look up tea in the archive")
        await v.wait_for("tts", state="stop", after=mark, timeout=30)
        await v.__aexit__(None, None, None)  # the device leaves while the tool runs
        await until(lambda: _gone(base, V_MAC), 10, "the device's session to end")
        await until(
            lambda: _logged(serve.text(), "finished while the device is away: kept 10 min"),
            20,
            "the result to be kept on w0",
        )

        b3 = await connect()  # w0: now the busier one, so the device comes back on w1
        llm.expect(Reply.text("The archive says tea is 42."))
        v = await connect(V_MAC)
        assert (await worker_of(base, V_MAC))[0] == 1
        start_of = await v.wait_for("tts", state="sentence_start", timeout=30)
        assert start_of["text"] == "The archive says tea is 42."
        llm.assert_all_consumed()
        note = json.dumps(llm.messages(2))
        assert "slow_lookup" in note and "tea: 42" in note, note
        await v.wait_for("tts", state="stop", timeout=30)

        # Again from w1, and the device is back on w0 before the tool finishes: the result is
        # sent to its live session there.
        llm.expect(Reply.tool_call("slow_lookup", {"topic": "coffee", "seconds": 6}), Reply.text("Looking."))
        mark = v.mark()
        await v.send_text("and coffee")
        await v.wait_for("tts", state="stop", after=mark, timeout=30)
        await b3.__aexit__(None, None, None)
        await v.__aexit__(None, None, None)
        await until(lambda: _gone(base, V_MAC), 10, "the device's session to end")
        await until(lambda: _gone(base, b3.device_id), 10, "the bystander's session to end")
        llm.expect(Reply.text("The archive says coffee is 42."))
        v = await connect(V_MAC)
        assert (await worker_of(base, V_MAC))[0] == 0
        start_of = await v.wait_for("tts", state="sentence_start", timeout=30)
        assert start_of["text"] == "The archive says coffee is 42."
        assert "coffee: 42" in json.dumps(llm.messages(5))
        assert "task task_1 (slow_lookup) of aa:bb:cc:dd:ee:01: result sent to its session on worker w0" in serve.text()
    finally:
        for device in devices:
            await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()
    assert "Traceback" not in serve.text()


async def _gone(base: str, device_id: str) -> bool:
    sessions = (await api(base, "GET", "/api/sessions"))["sessions"]
    return all(s["device_id"] != device_id for s in sessions)


async def _logged(text: str, line: str) -> bool:
    await asyncio.sleep(0)
    return line in text


async def test_one_process_keeps_a_result_for_the_device_s_next_session(tmp_path: Path) -> None:
    tool = tmp_path / "slow_tools.py"
    tool.write_text(SLOW_TOOL, encoding="utf-8")
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, _ = await start(
        tmp_path,
        llm=llm,
        workers=1,
        extra=f"""
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
            lambda: _logged(serve.text(), "finished while the device is away: kept 10 min"), 20, "the result to be kept"
        )
        llm.expect(Reply.text("The archive says tea is 42."))
        v = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, listening_mode="manual", mcp=False)
        await v.__aenter__()
        await v.connect()
        start_of = await v.wait_for("tts", state="sentence_start", timeout=30)
        assert start_of["text"] == "The archive says tea is 42."
        assert "tea: 42" in json.dumps(llm.messages(2))
    finally:
        await v.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()
    assert "Traceback" not in serve.text()
