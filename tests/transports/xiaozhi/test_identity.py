"""A device is who it proves to be (docs/security.md, "Who a device is"): a real server with the
default SQLite store, simulated devices over real WebSockets and OTA, and the scripted model on
loopback. The victim says "My name is Alice..." and leaves; a claimant with the victim's MAC and
its own Client-Id gets none of it (the model's instructions and history are asserted), cannot
close the victim's live session, gets no OTA token and cannot pair by token; the victim with its
own Client-Id gets everything back, on every setup: auth off, auth on with the MAC allow-listed,
auth with activation."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.state.test_forget import exchange
from tests.state.test_long_term import system
from tests.state.test_resume import ALICE, conversation, hang_up, say, start, until, url
from vixio.app.server import VixioServer
from vixio.state.fact_merge import spoken
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.transports.xiaozhi.session.auth import issue_token
from vixio.transports.xiaozhi.session.identity import claimant_device_id

pytestmark = pytest.mark.integration

VICTIM = "02:00:00:00:a1:1c"
V_CLIENT = "0b6a1c52-5d5e-4d8a-9f0e-1f2a3b4c5d6e"
ATT_CLIENT = "att-client"
SECRET = "identity-test-secret"
SETUPS = {
    "auth-off": {},
    "allow-listed": {"auth": {"enabled": True, "secret": SECRET, "allowed_devices": [VICTIM]}},
    "activation": {"auth": {"enabled": True, "secret": SECRET}, "activation": {"enabled": True}},
}
HELD = json.dumps(
    {
        "task_id": "t1",
        "call_id": "c1",
        "tool_name": "read_alarm",
        "status": "completed",
        "result": "The alarm code is 4711.",
    }
)
"""A background result held for the victim while it is away (vixio/app/task_results.py)."""


async def serve(llm: ScriptedLLMServer, tmp_path: Path, **xiaozhi: Any) -> VixioServer:
    """A server on the default SQLite store, learning facts (the default); `xiaozhi`: the setup."""
    config: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "http": {"host": "127.0.0.1", "port": 0},
        "idle_timeout": 0,
        **xiaozhi,
    }
    return await start(llm, tmp_path, xiaozhi=config)


def ota_url(server: VixioServer) -> str:
    return f"http://127.0.0.1:{server.ota.port}/xiaozhi/ota/"


async def ota(server: VixioServer, client_id: str, device_id: str = VICTIM) -> dict[str, Any]:
    body = {"mac_address": device_id, "uuid": client_id, "application": {"version": "2.4.2"}}
    async with (
        aiohttp.ClientSession() as http,
        http.post(ota_url(server), json=body, headers={"Device-Id": device_id, "Client-Id": client_id}) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def connected(server: VixioServer, device_id: str) -> str:
    await until(
        lambda: any(c.device_id == device_id for c in server.transport.connections.values()),
        10,
        f"a session of {device_id}",
    )
    return next(sid for sid, c in server.transport.connections.items() if c.device_id == device_id)


@pytest.mark.parametrize("setup", list(SETUPS))
async def test_a_claimant_of_the_mac_gets_none_of_the_devices_memory_and_the_device_gets_it_back(
    llm: ScriptedLLMServer, tmp_path: Path, setup: str
) -> None:
    server = await serve(llm, tmp_path, **SETUPS[setup])
    try:
        if setup == "activation":  # the operator confirmed the victim's code earlier
            await server.store.admit(VICTIM, via="activation")
        llm.expect(Reply.text("Nice to meet you, Alice."))
        async with SimulatedDevice(ota_url=ota_url(server), device_id=VICTIM, client_id=V_CLIENT, mcp=False) as victim:
            await victim.connect()
            assert (victim.token != "") == (setup == "activation")
            await say(victim, ALICE)
            await hang_up(server, victim)
        await until_stored(server, VICTIM, {"Alice", "green tea"})
        await server.store.hold_result(VICTIM, HELD, time.time() + 600, keep=5)

        # The claimant asks OTA for the victim's MAC with its own Client-Id: no token, whatever the setup.
        answer = await ota(server, ATT_CLIENT)
        assert answer["websocket"]["token"] == ""
        # With auth on it could still hold a token OTA handed out before this release; auth accepts it.
        token = issue_token(SECRET, ATT_CLIENT, VICTIM) if setup == "activation" else ""
        llm.expect(Reply.text("I do not know your name."))
        async with SimulatedDevice(
            ws_url=url(server), device_id=VICTIM, client_id=ATT_CLIENT, token=token, mcp=False
        ) as claimant:
            await claimant.connect()
            assert await exchange(claimant, "what do you remember about me") == spoken([], "en")
            await say(claimant, "what is my name")
            served_as = [c.device_id for c in server.transport.connections.values()]
            await hang_up(server, claimant)
        given = llm.messages(1)
        assert "Alice" not in system(given) and "green tea" not in system(given)
        assert conversation(given) == [("user", "what is my name")]
        assert "4711" not in json.dumps(given)
        assert served_as == [claimant_device_id(VICTIM, ATT_CLIENT)]
        assert await server.store.take_results(VICTIM) == [HELD]  # still the victim's
        assert await server.store.facts(served_as[0]) == []
        requests = await server.store.rebind_requests(VICTIM)
        assert [(r.client_id, r.attempts) for r in requests] == [(ATT_CLIENT, 2)]  # OTA, then the WebSocket

        llm.expect(Reply.text("Your name is Alice."))
        async with SimulatedDevice(ota_url=ota_url(server), device_id=VICTIM, client_id=V_CLIENT, mcp=False) as victim:
            await victim.connect()
            await say(victim, "what is my name")
            await hang_up(server, victim)
        back = llm.messages(2)
        assert "- Name: Alice (" in system(back) and "- Likes: green tea (" in system(back)
        assert ("user", ALICE) in conversation(back) and conversation(back)[-1] == ("user", "what is my name")
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def until_stored(server: VixioServer, device_id: str, values: set[str]) -> None:
    """Facts are written behind the turn that said them: wait (bounded) until `values` are stored."""
    deadline = time.monotonic() + 10
    while not values <= {f.value for f in await server.store.facts(device_id)}:
        assert time.monotonic() < deadline, f"{values} never stored for {device_id}"
        await asyncio.sleep(0.05)


async def test_a_claimant_does_not_close_the_devices_live_session_and_the_device_itself_replaces_it(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Go on."), Reply.text("Still here."))
    server = await start(llm, tmp_path)
    try:
        async with (
            SimulatedDevice(ws_url=url(server), device_id=VICTIM, client_id=V_CLIENT, mcp=False) as victim,
            SimulatedDevice(ws_url=url(server), device_id=VICTIM, client_id=ATT_CLIENT, mcp=False) as claimant,
        ):
            await victim.connect()
            first = await connected(server, VICTIM)
            await say(victim, "one")
            for _ in range(3):  # repeated, it keeps nobody off
                await claimant.connect()
                await asyncio.sleep(0.3)  # the takeover closed the older session 0.02 s after the claim
                assert victim.connected and first in server.transport.connections
                await connected(server, claimant_device_id(VICTIM, ATT_CLIENT))
                await claimant.close()
            await say(victim, "two")  # mid-session still
            assert victim.connected
            async with SimulatedDevice(ws_url=url(server), device_id=VICTIM, client_id=V_CLIENT, mcp=False) as again:
                await again.connect()  # the device's own reconnection replaces its older session, as before
                await victim.wait_closed()
                await until(lambda: first not in server.transport.connections, 10, "the older session to end")
                assert await connected(server, VICTIM) != first
    finally:
        await server.stop()


async def test_ota_pins_on_first_contact_and_hands_a_token_only_to_the_pinned_client_id(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    server = await serve(llm, tmp_path, auth={"enabled": True, "secret": SECRET})
    try:
        assert (await ota(server, V_CLIENT))["websocket"]["token"]  # first contact: pinned
        assert (await ota(server, ATT_CLIENT))["websocket"]["token"] == ""
        assert (await ota(server, V_CLIENT))["websocket"]["token"]
        pin = await server.store.identity_pin(VICTIM)
        assert pin is not None and pin.client_id == V_CLIENT
        # Another MAC the claimant contacts first is its own.
        assert (await ota(server, ATT_CLIENT, "02:00:00:00:0a:77"))["websocket"]["token"]
        # An operator re-binds the MAC (a re-flashed board): the new Client-Id gets the token, the old none.
        await server.store.repin_identity(VICTIM, ATT_CLIENT)
        assert (await ota(server, ATT_CLIENT))["websocket"]["token"]
        assert (await ota(server, V_CLIENT))["websocket"]["token"] == ""
    finally:
        await server.stop()
