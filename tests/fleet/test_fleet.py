"""Two `vixio serve` instances (one worker each) on one real redis-server: the live-session
directory and the calls routed between instances over Redis (vixio/fleet/bus.py). Real processes,
real WebSockets, the scripted model on loopback (shared by both instances), espeak.

Devices connect straight to an instance's port, as a load balancer would have placed them.
Without the `redis-server` package these tests skip, naming it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fleet.test_bus import published
from vixio.fleet.directory import COMPANION, REPLACED
from vixio.serve.supervisor import reuse_port_supported
from vixio.state.redis import RedisStore
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.redis_server import FLEET_SECRET, RedisServer
from vixio.testing.register_client import ClientTool, RegisterClient
from vixio.testing.serve import ServeProcess, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

V_MAC = "aa:bb:cc:dd:ee:31"
A_ID = "robot-fleet"
TTL = 3
SLOW_TOOL = '''
import asyncio


async def slow_lookup(topic: str, seconds: float = 3.0) -> str:
    """Looks a topic up in the slow archive."""
    await asyncio.sleep(seconds)
    return f"{topic}: 42"
'''


@pytest.fixture
async def directory(redis: RedisServer) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis.url, prefix="fleet:")
    await store.open()
    yield store
    await store.close()


async def start_instance(
    tmp_path: Path, name: str, redis: RedisServer, llm: ScriptedLLMServer | None, extra: str = "", xiaozhi: str = ""
) -> ServeProcess:
    folder = tmp_path / name
    folder.mkdir()
    return await start_serve(
        folder,
        llm,
        "--workers",
        "1",
        xiaozhi="pairing: {trust_mac: true}\n" + xiaozhi,
        server=f"instance: {name}\ndirectory_ttl: {TTL}",
        extra=f"""
state: {{backend: redis, url: "{redis.url}", prefix: "fleet:", fleet_secret: "{FLEET_SECRET}"}}
{extra}""",
    )


async def api(
    serve: ServeProcess,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, serve.base_url + path, json=body, params=params) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def session_of(serve: ServeProcess, device_id: str) -> dict[str, Any]:
    """The device's session as `serve`'s console lists it (waits for it)."""

    async def found() -> dict[str, Any] | None:
        sessions = (await api(serve, "GET", "/api/sessions"))["sessions"]
        return next((s for s in sessions if s["device_id"] == device_id), None)

    return await until(found, 20, f"{device_id} in the console")


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


async def test_pairing_say_and_results_cross_instances(tmp_path: Path, redis: RedisServer) -> None:
    tool = tmp_path / "slow_tools.py"
    tool.write_text(SLOW_TOOL, encoding="utf-8")
    tools = f"""
tools:
  local:
    - {{function: "{tool}:slow_lookup", async: true}}
"""
    async with AsyncExitStack() as stack:
        llm = await stack.enter_async_context(ScriptedLLMServer())
        a, b = await asyncio.gather(
            start_instance(tmp_path, "a", redis, llm, tools), start_instance(tmp_path, "b", redis, llm, tools)
        )
        for serve in (a, b):
            stack.push_async_callback(serve.stop)
        await asyncio.gather(a.wait_ready(), b.wait_ready())

        device = await stack.enter_async_context(
            SimulatedDevice(ws_url=a.ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
        )
        await device.connect()
        # The console of B lists the session on A, marked with its instance.
        on_a = await session_of(b, V_MAC)
        assert (on_a["instance"], on_a["worker"]) == ("a", 0)

        # A companion on B pairs with the device on A; the device's model calls its tool across.
        readings: list[dict[str, Any]] = []
        companion = RegisterClient(b.ws_url, thermometer(readings), device_id=A_ID)
        stack.push_async_callback(companion.close)
        await companion.connect(hello=False)
        assert (await companion.register(mac_addr=V_MAC))["result"]["pairing"] == "paired"
        assert "read_thermometer" in [
            t["name"] for t in (await api(a, "GET", "/api/tools", params={"session": on_a["session_id"]}))["tools"]
        ]
        llm.expect(Reply.tool_call("read_thermometer", {"room": "kitchen"}), Reply.text("It is 21.5 degrees."))
        mark = device.mark()
        await device.send_text("how warm is the kitchen")
        assert (await companion.wait_for_execution("read_thermometer", timeout=30)).tool_input == {"room": "kitchen"}
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        assert await companion.wait_for_ai("final", timeout=10) == "It is 21.5 degrees."
        assert "companion robot-fleet on worker b/w0 paired with device" in a.text()

        # The console of B says to the session on A, and runs a tool there.
        llm.expect(Reply.text("Said from instance b."))
        mark = device.mark()
        await api(b, "POST", "/api/say", {"session": on_a["session_id"], "text": "from the other instance"})
        assert (await device.wait_for("stt", after=mark, timeout=30))["text"] == "from the other instance"
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        executed = await api(
            b,
            "POST",
            "/api/execute",
            {"session": on_a["session_id"], "tool": "read_thermometer", "arguments": {"room": "attic"}},
        )
        assert executed["success"] and json.loads(executed["result"])["room"] == "attic", executed
        assert readings == [{"room": "kitchen"}, {"room": "attic"}]

        # An async tool started on A finishes after the device reconnected to B: the result reaches it there.
        llm.expect(Reply.tool_call("slow_lookup", {"topic": "tea"}), Reply.text("Let me look that up."))
        mark = device.mark()
        await device.send_text("look up tea in the archive")
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        await device.close()
        llm.expect(Reply.text("The archive says tea is 42."))
        back = await stack.enter_async_context(
            SimulatedDevice(ws_url=b.ws_url, device_id=V_MAC, mcp=False, listening_mode="manual")
        )
        await back.connect()
        assert (await session_of(a, V_MAC))["instance"] == "b"
        start_of = await back.wait_for("tts", state="sentence_start", timeout=30)
        assert start_of["text"] == "The archive says tea is 42."
        assert "tea: 42" in json.dumps(llm.messages(-1))
        llm.assert_all_consumed()
    for serve in (a, b):
        assert "Traceback" not in serve.text(), serve.text()


async def test_one_session_per_device_activation_anywhere_and_a_killed_instance_leaves_the_directory(
    tmp_path: Path, redis: RedisServer, directory: RedisStore
) -> None:
    activation = "activation: {enabled: true}"
    async with AsyncExitStack() as stack:
        a, b = await asyncio.gather(
            start_instance(tmp_path, "a", redis, None, xiaozhi=activation),
            start_instance(tmp_path, "b", redis, None, xiaozhi=activation),
        )
        stack.callback(a.kill_group)
        stack.push_async_callback(b.stop)
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        # A device gets its code from a's OTA; the operator confirms it on b at once: b asks every
        # supervisor subscribed to the bus (a's worker may join the members a moment later).
        pending = "aa:bb:cc:dd:ee:77"
        headers = {
            "Device-Id": pending,
            "Client-Id": "0f3c1a2b-1111-4222-8333-444455556677",
            "Content-Type": "application/json",
        }
        async with aiohttp.ClientSession() as http:
            async with http.post(
                a.base_url + "/xiaozhi/ota/", headers=headers, json={"mac_address": pending}
            ) as answer:
                code = (await answer.json())["activation"]["code"]
            async with http.post(b.base_url + "/xiaozhi/ota/activate/confirm", json={"code": code}) as answer:
                assert answer.status == 200 and (await answer.json())["device_id"] == pending, await answer.text()
            async with http.post(b.base_url + "/xiaozhi/ota/activate/confirm", json={"code": code}) as answer:
                assert answer.status == 404  # confirmed once
            async with http.post(a.base_url + "/xiaozhi/ota/activate", headers=headers, data="{}") as answer:
                assert answer.status == 200  # the device finishes on a
        assert await directory.admission(pending) is not None

        async def listed(companions: bool = False) -> list[tuple[str, str]]:
            """Sessions by (device, holder), or with `companions` where companions wait for a device."""
            return sorted(
                (s.device_id, s.worker)
                for s in await directory.live_sessions()
                if s.session_id.startswith(COMPANION) == companions
            )

        stale = await stack.enter_async_context(SimulatedDevice(ws_url=a.ws_url, device_id=V_MAC, mcp=False))
        await stale.connect()
        other = await stack.enter_async_context(SimulatedDevice(ws_url=a.ws_url, mcp=False))
        await other.connect()
        await until(
            lambda: _equal(listed(), sorted([(V_MAC, "a/w0"), (other.device_id, "a/w0")])),
            20,
            "both sessions on a in the directory",
        )
        # The device reconnects through the load balancer to b while a still holds its old connection.
        fresh = await stack.enter_async_context(SimulatedDevice(ws_url=b.ws_url, device_id=V_MAC, mcp=False))
        await fresh.connect()
        await until(lambda stale=stale: _true(stale.close_code == 1000), 20, "a to close the stale session")
        assert stale.protocol.close_reason == REPLACED and fresh.connected
        await until(
            lambda: _equal(listed(), sorted([(V_MAC, "b/w0"), (other.device_id, "a/w0")])),
            20,
            "the device listed on b only",
        )
        assert len([s for s in (await api(b, "GET", "/api/sessions"))["sessions"] if s["device_id"] == V_MAC]) == 1

        # registerTools per Device-Id holds fleet-wide: 6 on a, then the 5th on b is the 11th in the minute.
        flood = "robot-flood"
        on_a = RegisterClient(a.ws_url, device_id=flood)
        on_b = RegisterClient(b.ws_url, device_id=flood)
        for client in (on_a, on_b):
            stack.push_async_callback(client.close)
            await client.connect(hello=False)
        assert all(["result" in await on_a.register(mac_addr=V_MAC) for _ in range(6)])
        answers = [await on_b.register(mac_addr=V_MAC) for _ in range(5)]
        assert ["result" in answer for answer in answers] == [True, True, True, True, False], answers
        assert "registrations_per_minute is 10" in answers[-1]["error"]["message"]

        a.kill_group()  # kill -9, supervisor and worker: nothing says its sessions ended
        await a.process.wait()
        await until(lambda: _equal(listed(), [(V_MAC, "b/w0"), (flood, "b/w0")]), TTL + 10, "a's entries to expire")
        # Both registerTools clients wait for V_MAC's device: only b's listing outlives a.
        assert await listed(companions=True) == [(V_MAC, "b/w0")]
        # b's console lists what is left.
        sessions = (await api(b, "GET", "/api/sessions"))["sessions"]
        assert sorted((s["device_id"], s.get("instance")) for s in sessions) == [(V_MAC, "b"), (flood, "b")]


async def _equal(value: Any, expected: Any) -> bool:
    return await value == expected


async def _true(value: bool) -> bool:
    return value


async def test_a_client_of_redis_without_the_fleet_secret_cannot_make_an_instance_act(
    tmp_path: Path, redis: RedisServer, llm: ScriptedLLMServer
) -> None:
    """What the issue did with redis-cli: a console call published on a worker's channel set the
    volume of a live device and made it speak. Unsigned, forged and replayed calls now do nothing."""
    import redis.asyncio as aioredis

    from vixio.fleet.bus import RedisBus

    async with AsyncExitStack() as stack:
        a = await start_instance(tmp_path, "a", redis, llm)
        stack.push_async_callback(a.stop)
        await a.wait_ready()
        device = await stack.enter_async_context(
            SimulatedDevice(ws_url=a.ws_url, device_id=V_MAC, listening_mode="manual")
        )
        await device.connect()
        session_id = (await session_of(a, V_MAC))["session_id"]
        await until(lambda: _listed_tool(a, session_id, "self.audio_speaker.set_volume"), 20, "the device's tools")

        def call(name: str, **args: Any) -> dict[str, Any]:
            return {"call": name, "args": {"session_id": session_id, **args}}

        volume = call("execute", tool="self.audio_speaker.set_volume", arguments={"volume": 99})
        speak = call("say", text="forged words")
        raw = aioredis.Redis.from_url(redis.url)
        stack.push_async_callback(raw.aclose)
        eavesdropper = raw.pubsub()
        stack.push_async_callback(eavesdropper.aclose)
        await eavesdropper.subscribe("fleet:bus:a/w0")
        mark = device.mark()
        for body in (volume, speak):
            unsigned = json.dumps(
                {"id": "x:1", "reply_to": "fleet:bus:x/w0", "method": "POST", "path": "/internal/console", "json": body}
            )
            assert await raw.publish("fleet:bus:a/w0", unsigned) == 2  # the worker and the eavesdropper
            assert await raw.publish("fleet:bus:a/w0", "v1." + "0" * 64 + "." + unsigned) == 2
        await asyncio.sleep(1.5)
        assert device.status.volume == 70  # untouched
        assert not [t for t in device.recording.types_since(mark) if t.startswith(("stt", "tts"))]

        # A genuine member (the fleet's secret) sets the volume twice; its first call is published again.
        member = RedisBus(redis.url, "t/supervisor", prefix="fleet:", member=False, secret=FLEET_SECRET)
        await member.start()
        stack.push_async_callback(member.close)
        for level in (40, 50):
            reply = await member.request(
                "a/w0",
                "POST",
                "/internal/console",
                timeout=10,
                json=call("execute", tool="self.audio_speaker.set_volume", arguments={"volume": level}),
            )
            assert reply.ok, reply.body
        captured = await published(eavesdropper)
        assert len(captured) == 6
        assert await raw.publish("fleet:bus:a/w0", captured[4]) == 2  # volume 40, again
        await asyncio.sleep(1.5)
        assert device.status.volume == 50
        assert not [t for t in device.recording.types_since(mark) if t.startswith(("stt", "tts"))]
        dropped = [line for line in a.text().splitlines() if "fleet bus: dropped" in line]
        assert len(dropped) == 3, dropped  # one line per kind: unsigned, forged, replayed
        kinds = ("not signed", "another secret", "already received")
        assert [kind in " ".join(dropped) for kind in kinds] == [True] * 3
        # No password on this Redis: said once, at startup.
        assert len([line for line in a.text().splitlines() if "has no password" in line]) == 1
    assert not llm.requests  # nothing was said to the model
    assert "Traceback" not in a.text(), a.text()


async def _listed_tool(serve: ServeProcess, session_id: str, tool: str) -> bool:
    tools = (await api(serve, "GET", "/api/tools", params={"session": session_id}))["tools"]
    return tool in [t["original_name"] for t in tools]


async def test_after_redis_forgot_the_directory_a_device_connecting_elsewhere_still_closes_its_old_session(
    tmp_path: Path, redis: RedisServer, directory: RedisStore
) -> None:
    """Split brain: entries are written once per session, so a Redis emptied under a fleet (FLUSHALL,
    or restarted without persistence) would leave every live session unlisted; the heartbeat
    (every TTL / 3 seconds) writes them again."""
    import redis.asyncio as aioredis

    async with AsyncExitStack() as stack:
        a, b = await asyncio.gather(
            start_instance(tmp_path, "a", redis, None), start_instance(tmp_path, "b", redis, None)
        )
        for serve in (a, b):
            stack.push_async_callback(serve.stop)
        await asyncio.gather(a.wait_ready(), b.wait_ready())

        async def listed(device_id: str) -> list[str]:
            return [s.worker for s in await directory.live_sessions(device_id)]

        async def forget_everything() -> None:
            raw = aioredis.Redis.from_url(redis.url)
            try:
                await raw.flushall()
            finally:
                await raw.aclose()

        for device_id, forget in ((V_MAC, forget_everything), ("aa:bb:cc:dd:ee:32", _restart(redis))):
            stale = await stack.enter_async_context(SimulatedDevice(ws_url=a.ws_url, device_id=device_id, mcp=False))
            await stale.connect()
            await until(lambda device_id=device_id: _equal(listed(device_id), ["a/w0"]), 20, "the device listed on a")
            await forget()
            assert await listed(device_id) in ([], ["a/w0"])  # empty, unless a's heartbeat came first
            await until(
                lambda device_id=device_id: _equal(listed(device_id), ["a/w0"]),
                TTL + 10,
                "a's heartbeat to list it again",
            )
            fresh = await stack.enter_async_context(SimulatedDevice(ws_url=b.ws_url, device_id=device_id, mcp=False))
            await fresh.connect()
            await until(lambda stale=stale: _true(stale.close_code == 1000), 20, "a to close the stale session")
            assert stale.protocol.close_reason == REPLACED and fresh.connected
            await until(
                lambda device_id=device_id: _equal(listed(device_id), ["b/w0"]), 20, "the device listed on b only"
            )
    assert "listed again" in a.text()
    for serve in (a, b):
        assert "Traceback" not in serve.text(), serve.text()


def _restart(redis: RedisServer) -> Any:
    async def restart() -> None:
        await asyncio.to_thread(redis.restart)  # no persistence: it comes back empty

    return restart
