"""A companion and its device on different workers of `vixio serve --workers 2` are paired
(vixio/fleet/companions.py): real processes, real WebSockets, the scripted model on loopback.

Placement is deterministic: the supervisor hands each connection to the worker with the fewest,
the lower index on a tie, so the first connection goes to w0 and the second to w1.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.register_client import ClientTool, RegisterClient
from vixio.testing.serve import ServeProcess, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

V_MAC = "aa:bb:cc:dd:ee:ff"
A_ID, A_CLIENT = "robot-a", "5f0c8e21-77aa-4f19-8d42-0c9d7e6b5a41"


async def start(
    tmp_path: Path, *, llm: ScriptedLLMServer | None = None, trust_mac: bool = False, extra: str = "", workers: int = 2
) -> tuple[ServeProcess, str, str]:
    serve = await start_serve(
        tmp_path,
        llm,
        "--workers",
        str(workers),
        extra=extra,
        xiaozhi=f"pairing: {{state_file: {tmp_path / 'pairings.json'}, trust_mac: {str(trust_mac).lower()}}}",
    )
    await serve.wait_ready()
    return serve, serve.ws_url, serve.base_url


async def api(
    base: str, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None
) -> Any:
    async with aiohttp.ClientSession() as http, http.request(method, base + path, json=body, params=params) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def worker_of(base: str, device_id: str) -> tuple[int, str]:
    async def found() -> tuple[int, str] | None:
        sessions = (await api(base, "GET", "/api/sessions"))["sessions"]
        return next(((s.get("worker", 0), s["session_id"]) for s in sessions if s["device_id"] == device_id), None)

    return await until(found, 20, f"the session of {device_id}")


def thermometer(readings: list[dict[str, Any]]) -> list[ClientTool]:
    def read(args: dict[str, Any]) -> dict[str, Any]:
        readings.append(args)
        return {"celsius": 21.5, "room": args.get("room", "")}

    return [
        ClientTool(
            "read_thermometer",
            "Reads the temperature of a room.",
            {"type": "object", "properties": {"room": {"type": "string"}}},
            read,
        )
    ]


async def session_tools(base: str, session_id: str) -> list[str]:
    tools = await api(base, "GET", "/api/tools", params={"session": session_id})
    return sorted(tool["name"] for tool in tools["tools"])


async def test_a_companion_on_w1_pairs_with_its_device_on_w0_by_approval(tmp_path: Path) -> None:
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, base = await start(tmp_path, llm=llm)
    device = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
    readings: list[dict[str, Any]] = []
    a = RegisterClient(ws_url, thermometer(readings), device_id=A_ID, client_id=A_CLIENT)
    try:
        await device.__aenter__()
        await device.connect()
        assert (await worker_of(base, V_MAC))[0] == 0
        await a.connect(hello=False)
        result = (await a.register(mac_addr="AA-BB-CC-DD-EE-FF"))["result"]
        assert result["pairing"] == "pending_approval", result
        v_worker, v_session = await worker_of(base, V_MAC)
        a_worker, _ = await worker_of(base, A_ID)
        assert (v_worker, a_worker) == (0, 1)

        approved = await api(base, "POST", "/api/pairing/approve", {"id": result["pairing_id"]})
        assert [(e["worker"], e["paired"], e["device_session"]) for e in approved["companions"]] == [
            (1, True, v_session)
        ], approved
        assert (await a.wait_for_pairing("paired", timeout=10))["pairing_id"] == result["pairing_id"]
        assert "read_thermometer" in await session_tools(base, v_session)

        # The device's model calls the companion's tool: it runs on A's socket, its result comes back.
        llm.expect(
            Reply.tool_call("read_thermometer", {"room": "kitchen"}), Reply.text("It is 21.5 degrees in the kitchen.")
        )
        mark = device.mark()
        await device.send_text("how warm is the kitchen")
        execution = await a.wait_for_execution("read_thermometer", timeout=30)
        assert execution.tool_input == {"room": "kitchen"}
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        assert await a.wait_for_ai("final", timeout=10) == "It is 21.5 degrees in the kitchen."
        llm.assert_all_consumed()
        tool_message = next(m for m in llm.messages(1) if m["role"] == "tool")
        assert json.loads(tool_message["content"]) == {"celsius": 21.5, "room": "kitchen"}

        # The console's Execute on the device's session (w0) runs the companion's tool (w1).
        executed = await api(
            base,
            "POST",
            "/api/execute",
            {"session": v_session, "tool": "read_thermometer", "arguments": {"room": "attic"}},
        )
        assert executed["success"] and json.loads(executed["result"]) == {"celsius": 21.5, "room": "attic"}, executed
        assert readings == [{"room": "kitchen"}, {"room": "attic"}]

        # The companion leaves: its tool leaves the device's session on the other worker.
        await a.close()
        await until(lambda: _without(base, v_session, "read_thermometer"), 10, "the tool to leave the device")
    finally:
        await a.close()
        await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()
    assert "Traceback" not in serve.text()


async def _without(base: str, session_id: str, tool: str) -> bool:
    return tool not in await session_tools(base, session_id)


async def test_a_waiting_companion_pairs_when_its_device_connects_to_the_other_worker(tmp_path: Path) -> None:
    serve, ws_url, base = await start(tmp_path, trust_mac=True)
    a = RegisterClient(ws_url, thermometer([]), device_id=A_ID, client_id=A_CLIENT)
    device = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
    try:
        await a.connect(hello=False)
        result = (await a.register(mac_addr=V_MAC))["result"]
        assert result["pairing"] == "waiting_for_device", result
        await device.__aenter__()
        await device.connect()
        v_worker, _ = await worker_of(base, V_MAC)
        assert ((await worker_of(base, A_ID))[0], v_worker) == (0, 1)

        async def paired(expected: bool) -> bool:
            companions = (await api(base, "GET", "/api/pairing"))["companions"]
            return [(c["worker"], c["paired"]) for c in companions] == [(0, expected)]

        await until(lambda: paired(True), 10, "the companion on w0 to pair with the device on w1")
        assert f"companion {A_ID} on worker w0 paired with device {V_MAC} here (1 tools)" in serve.text()

        # The device leaves: the companion waits for it again, and pairs again when it is back.
        await device.__aexit__(None, None, None)
        await until(lambda: paired(False), 10, "the companion to wait for its device again")
        device = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
        await device.__aenter__()
        await device.connect()
        await until(lambda: paired(True), 10, "the companion to pair with the device back")
    finally:
        await a.close()
        await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
    assert "Traceback" not in serve.text()


async def test_a_companion_pairs_again_after_its_devices_worker_died(tmp_path: Path) -> None:
    serve, ws_url, base = await start(tmp_path, trust_mac=True)
    device = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
    a = RegisterClient(ws_url, thermometer([]), device_id=A_ID, client_id=A_CLIENT)
    try:
        await device.__aenter__()
        await device.connect()
        await a.connect(hello=False)
        assert (await a.register(mac_addr=V_MAC))["result"]["pairing"] == "paired"
        assert [(await worker_of(base, d))[0] for d in (V_MAC, A_ID)] == [0, 1]

        # w0 dies with the device's session: no device_gone reaches w1.
        w0 = next(line for line in (await serve.metrics())["workers"] if line["worker"] == 0)
        os.kill(w0["pid"], signal.SIGKILL)
        await device.wait_closed(timeout=15)

        async def restarted() -> bool:
            line = next(line for line in (await serve.metrics())["workers"] if line["worker"] == 0)
            return line["status"] == "up" and line["pid"] != w0["pid"]

        await until(restarted, 120, "w0 to be restarted")
        before = serve.text().count(f"companion {A_ID} on worker w1 paired with device {V_MAC} here")
        await device.__aexit__(None, None, None)
        device = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
        await device.__aenter__()
        await device.connect()
        assert (await worker_of(base, V_MAC))[0] == 0

        async def paired_again() -> bool:
            return serve.text().count(f"companion {A_ID} on worker w1 paired with device {V_MAC} here") > before

        await until(paired_again, 10, "the companion to pair with the device back on the restarted w0")
        companions = (await api(base, "GET", "/api/pairing"))["companions"]
        assert [(c["worker"], c["paired"]) for c in companions] == [(1, True)]
    finally:
        await a.close()
        await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
