"""Companion approval under `vixio serve --workers 2`: the supervisor writes the approval (here
from `vixio pairing`, a separate process), the worker holding the waiting companion pairs it at
once, and the other worker honours the same approval for a companion that lands there.

Placement is deterministic: the supervisor hands each connection to the worker with the fewest,
the lower index on a tie, so V goes to w0, a bystander to w1, and companion A to w0 again.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.register_client import ClientTool, RegisterClient
from vixio.testing.serve import ServeProcess, start_serve

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

V_MAC = "aa:bb:cc:dd:ee:ff"
A_ID, A_CLIENT = "robot-a", "5f0c8e21-77aa-4f19-8d42-0c9d7e6b5a41"


async def start(tmp_path: Path) -> tuple[ServeProcess, str, str]:
    serve = await start_serve(
        tmp_path, None, "--workers", "2", xiaozhi=f"pairing: {{state_file: {tmp_path / 'pairings.json'}}}"
    )
    await serve.wait_ready()
    return serve, serve.ws_url, serve.base_url


async def get(base: str, path: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(base + path) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def vixio_pairing(base: str, *argv: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vixio",
        "pairing",
        *argv,
        "--url",
        base,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


def door() -> list[ClientTool]:
    return [
        ClientTool(
            "unlock_front_door",
            "Unlocks the front door.",
            {"type": "object", "properties": {}},
            lambda args: {"status": "success"},
            sub_type="control",
        )
    ]


async def test_an_approval_from_the_cli_is_honoured_by_the_workers(tmp_path: Path) -> None:
    serve, ws_url, base = await start(tmp_path)
    device = SimulatedDevice(ws_url=ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
    bystander = RegisterClient(ws_url)
    a = RegisterClient(ws_url, door(), device_id=A_ID, client_id=A_CLIENT)
    a2 = RegisterClient(ws_url, door(), device_id=A_ID, client_id=A_CLIENT)
    try:
        await device.__aenter__()
        await device.connect()
        await bystander.connect()
        await a.connect(hello=False)
        result = (await a.register(mac_addr="AA-BB-CC-DD-EE-FF"))["result"]
        assert result["pairing"] == "pending_approval", result
        pairing_id = result["pairing_id"]
        sessions = (await get(base, "/api/sessions"))["sessions"]
        v_worker = next(s["worker"] for s in sessions if s["device_id"] == V_MAC)
        state = await get(base, "/api/pairing")
        assert [(e["id"], e["worker"]) for e in state["pending"]] == [(pairing_id, v_worker)]

        code, out = await vixio_pairing(base, "approve", pairing_id)
        assert code == 0 and f"approved {pairing_id}: companion {A_ID} may pair with {V_MAC} (paired now)" in out, out
        assert (await a.wait_for_pairing("paired", timeout=10))["pairing_id"] == pairing_id

        # The same companion again lands on the other worker (fewest connections): it reads the
        # approval from the file and pairs with the device across workers (worker_companions.py).
        await a2.connect(hello=False)
        again = (await a2.register(mac_addr=V_MAC))["result"]
        assert again["pairing"] == "paired", again
        state = await get(base, "/api/pairing")
        assert sorted((e["worker"], e["grant"], e["paired"]) for e in state["companions"]) == sorted(
            [(v_worker, "approved", True), (1 - v_worker, "approved", True)]
        )
        assert [a["id"] for a in state["approved"]] == [pairing_id]

        code, out = await vixio_pairing(base, "revoke", pairing_id)
        assert code == 0 and "2 live companion(s) unpaired" in out, out
        await a.wait_for_pairing("pending_approval", timeout=10)
        assert (await get(base, "/api/pairing"))["approved"] == []
    finally:
        for client in (a, a2, bystander):
            await client.close()
        await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
