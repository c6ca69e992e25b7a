"""Resume across worker processes: `vixio serve --workers 2`, the device's second session on the
other worker, the scripted model receiving the first session's turns (the workers share the SQLite
file, or the redis-server)."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve, until

from .conftest import StoreFactory
from .test_resume import ALICE, conversation, say

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]


async def sessions_by_worker(serve: ServeProcess) -> dict[str, int]:
    """Device id -> the worker holding its session."""
    return {s["device_id"]: s["worker"] for s in (await serve.metrics())["detail"]}


async def worker_of(serve: ServeProcess, device: SimulatedDevice) -> int:
    async def found() -> Any:
        worker = (await sessions_by_worker(serve)).get(device.device_id)
        return None if worker is None else (worker,)  # worker 0 is falsy

    return int((await until(found, 30, f"{device.device_id}'s session in /metrics"))[0])


async def test_a_device_resumes_its_conversation_on_the_other_worker(
    tmp_path: Path, llm: ScriptedLLMServer, state_config: dict[str, Any], open_client: StoreFactory
) -> None:
    serve = await start_serve(tmp_path, llm, "--workers", "2", extra=f"state: {json.dumps(state_config)}\n")
    async with AsyncExitStack() as stack:
        stack.callback(serve.kill_group)
        ota_url = await serve.wait_ready()
        llm.expect(Reply.text("Nice to meet you, Alice."), Reply.text("Your name is Alice."))
        device = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url, mcp=False))
        await device.connect()
        first = await worker_of(serve, device)
        await say(device, ALICE)
        await device.close()

        async def gone() -> bool:
            return device.device_id not in await sessions_by_worker(serve)

        await until(gone, 30, "the first session to end")
        # Devices that stay connected fill the first worker, so the next connection goes to the other.
        for _ in range(6):
            holders = list((await sessions_by_worker(serve)).values())
            if holders.count(first) > holders.count(1 - first):
                break
            holder = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url, mcp=False))
            await holder.connect()
            await worker_of(serve, holder)
        await device.connect()
        assert await worker_of(serve, device) == 1 - first
        await say(device, "what is my name")
        assert conversation(llm.messages(1)) == [
            ("user", ALICE),
            ("assistant", "Nice to meet you, Alice."),
            ("user", "what is my name"),
        ]
        llm.assert_all_consumed()
        store = await open_client()  # the store the config names holds it
        turns = await until(lambda: store.recent_turns(device.device_id, 5), 10, "the turns in the store")
        assert turns[0].user == ALICE
