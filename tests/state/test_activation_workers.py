"""Activation with `vixio serve --workers 2`: the supervisor's HTTP port offers the code and takes
the operator's confirmation, the admission is kept in the state store, and the device's later
connections are let in on either worker, also after a restart."""

from __future__ import annotations

import asyncio
import re
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.state.sqlite import SqliteStore
from vixio.testing.device import SimulatedDevice
from vixio.testing.serve import ServeProcess, start_serve, until

from .test_resume_workers import sessions_by_worker, worker_of

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

DEVICE = "02:00:00:00:ac:71"
HOLDERS = [f"02:00:00:00:00:{n:02x}" for n in range(6)]
"""Allow-listed devices that stay connected, so the supervisor sends the next connection to the
other worker (it picks the one with the fewest)."""


async def serve(tmp_path: Path) -> ServeProcess:
    allowed = ", ".join(f'"{holder}"' for holder in HOLDERS)
    process = await start_serve(
        tmp_path,
        None,
        "--workers",
        "2",
        xiaozhi=f"""
activation: {{enabled: true}}
auth: {{enabled: true, secret: a-secret-for-the-test, allowed_devices: [{allowed}]}}
""",
        extra=f"state: {{path: {tmp_path / 'data' / 'state.db'}}}\n",
    )
    await process.wait_ready()
    return process


def device(serve: ServeProcess) -> SimulatedDevice:
    return SimulatedDevice(ota_url=serve.ota_url, device_id=DEVICE, mcp=False, activation_poll_interval=0.1)


async def test_a_device_confirmed_at_the_supervisor_is_let_in_on_both_workers_and_after_a_restart(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        first = await serve(tmp_path)
        stack.push_async_callback(first.stop)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        booting = device(first)
        stack.push_async_callback(booting.close)
        connecting = asyncio.create_task(booting.connect())  # OTA, then polls /activate until confirmed

        async def code() -> str | None:
            shown = re.search(rf"device {DEVICE} shows code (\d{{6}})", first.text())
            return shown.group(1) if shown else None

        shown = await until(code, 30, "the activation code in the log")
        await asyncio.sleep(0.5)
        assert not connecting.done()  # no channel before the operator confirms
        async with http.post(first.base_url + "/xiaozhi/ota/activate/confirm", json={"code": shown}) as reply:
            assert reply.status == 200 and (await reply.json())["device_id"] == DEVICE
        await asyncio.wait_for(connecting, 30)
        assert booting.ota is not None and booting.ota.token

        held = await worker_of(first, booting)
        await booting.close()

        async def gone() -> bool:
            return DEVICE not in await sessions_by_worker(first)

        await until(gone, 30, "the session to end")
        for holder_id in HOLDERS:
            holders = list((await sessions_by_worker(first)).values())
            if holders.count(held) > holders.count(1 - held):
                break
            holder = await stack.enter_async_context(
                SimulatedDevice(ws_url=first.ws_url, device_id=holder_id, mcp=False)
            )
            await holder.connect()
            await worker_of(first, holder)
        await booting.connect()  # OTA again, as the firmware does at every boot: no code now
        assert booting.ota is not None and "activation" not in booting.ota.reply
        workers = {held, await worker_of(first, booting)}
        assert workers == {0, 1}
        await booting.close()
        await first.stop()

        store = SqliteStore(tmp_path / "data" / "state.db")
        await store.open()
        try:
            admission = await store.admission(DEVICE)
            assert admission is not None and admission.via == "activation"
        finally:
            await store.close()

        second = await serve(tmp_path)
        stack.push_async_callback(second.stop)
        async with device(second) as again:
            await asyncio.wait_for(again.connect(), 30)
            assert again.ota is not None and "activation" not in again.ota.reply
            await worker_of(second, again)
        assert "Traceback" not in second.text()
