"""The live-session directory with `vixio serve --workers 2` (vixio/fleet/directory.py): real
processes, real WebSockets, the SQLite file the workers share, read here as another client.

Placement is deterministic: the supervisor hands each connection to the worker with the fewest,
the lower index on a tie.
"""

from __future__ import annotations

import os
import signal
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.fleet.test_workers_companions import worker_of
from vixio.fleet.directory import REPLACED
from vixio.serve.supervisor import reuse_port_supported
from vixio.state.sqlite import SqliteStore
from vixio.testing.device import SimulatedDevice
from vixio.testing.serve import start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

MAC = "aa:bb:cc:00:00:11"


async def test_one_session_per_device_across_workers_and_a_dead_workers_entries_go(tmp_path: Path) -> None:
    serve = await start_serve(tmp_path, None, "--workers", "2")
    store = SqliteStore(tmp_path / ".vixio" / "state.db")
    async with AsyncExitStack() as stack:
        stack.callback(serve.kill_group)
        await serve.wait_ready()
        base, url = serve.base_url, serve.ws_url
        await store.open()
        stack.push_async_callback(store.close)

        async def connect(device_id: str) -> SimulatedDevice:
            device = await stack.enter_async_context(SimulatedDevice(ws_url=url, device_id=device_id, mcp=False))
            await device.connect()
            return device

        async def holders(device_id: str | None = None) -> list[tuple[str, str]]:
            return sorted((s.session_id, s.worker) for s in await store.live_sessions(device_id))

        stale = await connect(MAC)  # w0
        await until(lambda: _equal(holders(MAC), [(stale.session_id, "w0")]), 20, "the device listed on w0")
        fresh = await connect(MAC)  # w1: the device reconnected while w0 still holds its old connection
        await until(lambda: _is(stale.close_code == 1000), 20, "w0 to close the stale session")
        assert stale.protocol.close_reason == REPLACED and fresh.connected
        assert await worker_of(base, MAC) == (1, fresh.session_id)
        await until(lambda: _equal(holders(MAC), [(fresh.session_id, "w1")]), 20, "only the w1 session listed")
        assert f"closed its earlier session {stale.session_id} on w0" in serve.text()

        other = await connect("aa:bb:cc:00:00:12")  # w0
        await until(
            lambda: _equal(holders(), sorted([(fresh.session_id, "w1"), (other.session_id, "w0")])),
            20,
            "both devices listed",
        )
        w1 = next(line["pid"] for line in (await serve.metrics())["workers"] if line["worker"] == 1)
        os.kill(w1, signal.SIGKILL)  # its sessions cannot say they ended
        await until(
            lambda: _equal(holders(), [(other.session_id, "w0")]),
            20,
            "the supervisor to forget the dead worker's sessions",
        )


async def _equal(value: object, expected: object) -> bool:
    return await value == expected  # type: ignore[misc]


async def _is(value: bool) -> bool:
    return value
