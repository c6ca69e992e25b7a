"""Who a device is, through `vixio serve --workers 2` on the default SQLite store (auth off, the
household default): a claimant of a MAC with its own Client-Id gets none of the device's memory
whichever worker serves it, the device with its own Client-Id does; then an operator approves the
claimant's re-bind with `vixio identity approve` (a re-flashed board) and that board is the device,
with its memory."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.state.test_alice_workers import requests
from tests.state.test_forget import exchange
from tests.state.test_long_term import system
from tests.state.test_resume import ALICE, conversation
from vixio.fleet.directory import REPLACED
from vixio.serve.supervisor import reuse_port_supported
from vixio.state.fact_merge import spoken
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

VICTIM = "02:00:00:00:a1:1c"
V_CLIENT = "0b6a1c52-5d5e-4d8a-9f0e-1f2a3b4c5d6e"
NEW_BOARD = "att-client"


async def identity_cli(serve: ServeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "vixio", "identity", *args, "--url", serve.base_url],
        capture_output=True,
        text=True,
    )


async def talk(serve: ServeProcess, client_id: str, text: str) -> None:
    async with SimulatedDevice(ota_url=serve.ota_url, device_id=VICTIM, client_id=client_id, mcp=False) as device:
        await device.connect()
        await exchange(device, text)


async def test_a_claimant_on_any_worker_gets_nothing_and_an_approved_rebind_gets_everything(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    serve = await start_serve(tmp_path, llm, "--workers", "2")  # facts: the default
    try:
        await serve.wait_ready()
        llm.expect(Reply.text("Nice to meet you, Alice."))
        await talk(serve, V_CLIENT, ALICE)
        await requests(llm, 1, "the victim's turn")

        async with SimulatedDevice(ota_url=serve.ota_url, device_id=VICTIM, client_id=NEW_BOARD, mcp=False) as device:
            await device.connect()
            assert await exchange(device, "what do you remember about me") == spoken([], "en")  # nothing of hers
        llm.expect(Reply.text("I do not know."))
        await talk(serve, NEW_BOARD, "what is my name")
        await requests(llm, 2, "the claimant's question")
        assert "Alice" not in json.dumps(llm.messages(1))
        assert conversation(llm.messages(1)) == [("user", "what is my name")]

        llm.expect(Reply.text("Your name is Alice."))
        await talk(serve, V_CLIENT, "what is my name")
        await requests(llm, 3, "the victim's question")
        assert "- Name: Alice (" in system(llm.messages(2))
        assert ("user", ALICE) in conversation(llm.messages(2))

        listed = await identity_cli(serve, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        [pending] = json.loads(listed.stdout)["rebinds"]
        assert (pending["device_id"], pending["client_id"], pending["pinned_client_id"]) == (
            VICTIM,
            NEW_BOARD,
            V_CLIENT,
        )
        assert (await identity_cli(serve, "approve", VICTIM, "someone-else")).returncode == 2  # none pending
        approved = await identity_cli(serve, "approve", VICTIM, NEW_BOARD)
        assert approved.returncode == 0 and f"{VICTIM} is pinned to Client-Id {NEW_BOARD}" in approved.stdout
        assert "none" in (await identity_cli(serve, "list")).stdout

        llm.expect(Reply.text("Your name is Alice."))
        await talk(serve, NEW_BOARD, "what is my name")  # the re-flashed board is the device now
        await requests(llm, 4, "the re-bound board's question")
        assert "- Name: Alice (" in system(llm.messages(3))

        # Live on some worker, the device is not closed by claimants landing on either worker; its own
        # reconnection (its Client-Id) still replaces its older session, wherever that is.
        async with AsyncExitStack() as stack:
            live = await stack.enter_async_context(
                SimulatedDevice(ws_url=serve.ws_url, device_id=VICTIM, client_id=NEW_BOARD, mcp=False)
            )
            await live.connect()
            for _ in range(4):
                claimant = await stack.enter_async_context(
                    SimulatedDevice(ws_url=serve.ws_url, device_id=VICTIM, client_id=V_CLIENT, mcp=False)
                )
                await claimant.connect()
            await asyncio.sleep(1.0)  # a takeover closed the older session within 0.02 s
            assert live.connected
            again = await stack.enter_async_context(
                SimulatedDevice(ws_url=serve.ws_url, device_id=VICTIM, client_id=NEW_BOARD, mcp=False)
            )
            await again.connect()
            await live.wait_closed(timeout=20)
            assert live.protocol.close_reason == REPLACED and again.connected
        assert "Traceback" not in serve.text()
        llm.assert_all_consumed()
    finally:
        await serve.stop()
