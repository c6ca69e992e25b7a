"""Reassigning a profile at run time: the console's assignment is stored, wins over `devices:`, and
a live session switches at its next turn, without reconnecting, continuing its conversation. With
one process and with `vixio serve --workers 2` (the supervisor's console fans out to the workers)."""

from __future__ import annotations

import asyncio
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve, until
from vixio.testing.speech_servers import SlowSpeechServer

from .test_profiles_session import ADULT, KIDS, KIDS_PROMPT, ask, profiles_config, start, system, tts, url

pytestmark = pytest.mark.process

__all__ = ["tts"]  # the fixture


async def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(base + path, json=body) as response:
        return response.status, await response.json()


async def get(base: str, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(base + path) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def conversation(llm: ScriptedLLMServer, request: int) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in llm.messages(request) if m["role"] in ("user", "assistant")]


async def test_a_live_session_switches_at_its_next_turn_and_back_when_cleared(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Good evening."), Reply.text("Hi kiddo."), Reply.text("Good night."))
    server = await start(profiles_config(llm, tts, tmp_path))
    base = f"http://127.0.0.1:{server.ota.port}"
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=ADULT) as device:
            await device.connect()
            await ask(device, "hello")
            status, assigned = await post(base, "/api/profiles/assign", {"device": ADULT.upper(), "profile": "kids"})
            assert status == 200 and assigned["profile"] == "kids" and assigned["profile_source"] == "assigned"
            assert [s["profile"] for s in assigned["sessions"]] == ["kids"]
            listed = (await get(base, "/api/sessions"))["sessions"]
            assert [(s["profile"], s["profile_pending"]) for s in listed] == [("default", "kids")]
            assert await server.store.assigned_profile(ADULT) == "kids"
            await ask(device, "hello again")  # the same connection
            status, cleared = await post(base, "/api/profiles/clear", {"device": ADULT})
            assert status == 200 and cleared["profile"] == "default" and cleared["assigned"] is None
            await ask(device, "bye")
            shown = await get(base, f"/api/profiles/{ADULT}")
            assert shown["profile"] == "default" and shown["configured"] == "default" and shown["assigned"] is None
    finally:
        await server.stop()
    assert [llm.requests[n]["model"] for n in range(3)] == ["house-model", "kids-model", "house-model"]
    assert system(llm, 1).startswith(KIDS_PROMPT) and system(llm, 2).startswith("You are the house assistant.")
    assert sorted(llm.tool_names(0)) == ["get_date", "get_time"] and llm.tool_names(1) == ["get_date"]
    assert sorted(llm.tool_names(2)) == ["get_date", "get_time"]
    assert conversation(llm, 1) == [("user", "hello"), ("assistant", "Good evening."), ("user", "hello again")]
    assert [r.voice for r in tts.requests] == ["alloy", "nova", "alloy"]


async def test_the_console_refuses_an_unknown_profile_or_a_bad_device_id(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    server = await start(profiles_config(llm, tts, tmp_path))
    base = f"http://127.0.0.1:{server.ota.port}"
    try:
        status, answer = await post(base, "/api/profiles/assign", {"device": ADULT, "profile": "kidz"})
        assert status == 404 and answer["error"] == "no profile 'kidz' (profiles: default, kids)"
        status, answer = await post(base, "/api/profiles/assign", {"device": "x" * 65, "profile": "kids"})
        assert status == 400 and answer["error"].startswith("device refused: it is 65 characters long")
        listed = await get(base, "/api/profiles")
        assert [p["name"] for p in listed["profiles"]] == ["default", "kids"]
        assert listed["profiles"][1]["voice"] == "openai:nova" and listed["devices"] == {"aa:bb:cc:00:00:01": "kids"}
        assert await server.store.assigned_profile(ADULT) is None
    finally:
        await server.stop()
    config = profiles_config(llm, tts, tmp_path)
    config["xiaozhi"]["http"]["admin_token"] = "operator-token-for-tests"
    server = await start(config)
    base = f"http://127.0.0.1:{server.ota.port}"
    try:
        status, answer = await post(base, "/api/profiles/assign", {"device": ADULT, "profile": "kids"})
        assert status == 401 and await server.store.assigned_profile(ADULT) is None
    finally:
        await server.stop()


WORKER_PROFILES = """
state: {{path: {state}}}
devices: {{"{kids}": kids, "02:00:00:00:6b:*": kids}}
profiles:
  kids:
    instructions: {prompt}
    model: openai/kids-model
    tools: {{toggles: {{get_time: false}}}}
"""


@pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")
async def test_with_two_workers_the_supervisors_console_switches_the_session_on_its_worker(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    extra = WORKER_PROFILES.format(state=tmp_path / "state.db", prompt=KIDS_PROMPT, kids=KIDS.upper())
    serve = await start_serve(tmp_path, llm, "--workers", "2", extra=extra)
    async with AsyncExitStack() as stack:
        stack.callback(serve.kill_group)
        ota_url = await serve.wait_ready()
        llm.expect(Reply.text("Good evening."), Reply.text("Hi kiddo."))
        device = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url, mcp=False))
        await device.connect()

        async def listed() -> list[dict[str, Any]]:
            return [
                s
                for s in (await get(serve.base_url, "/api/sessions"))["sessions"]
                if s["device_id"] == device.device_id
            ]

        session = (await until(listed, 30, "the session in the console"))[0]
        assert session["profile"] == "default" and session["worker"] in (0, 1)
        await ask(device, "hello")
        status, assigned = await post(
            serve.base_url, "/api/profiles/assign", {"device": device.device_id, "profile": "kids"}
        )
        assert status == 200, assigned
        assert [(s["session_id"], s["worker"]) for s in assigned["sessions"]] == [
            (session["session_id"], session["worker"])
        ]
        await ask(device, "hello again")
        assert llm.requests[1]["model"] == "kids-model" and system(llm, 1).startswith(KIDS_PROMPT)
        assert llm.tool_names(1) == ["get_date"] and conversation(llm, 1)[:2] == [
            ("user", "hello"),
            ("assistant", "Good evening."),
        ]
        assert [(s["profile"], s["profile_source"]) for s in await listed()] == [("kids", "assigned")]
        # A device devices: names gets its profile from whichever worker holds it.
        llm.expect(Reply.text("Hello, little one."))
        kids = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url, mcp=False, device_id=KIDS))
        await kids.connect()
        await ask(kids, "hi")
        assert llm.requests[2]["model"] == "kids-model" and system(llm, 2).startswith(KIDS_PROMPT)
        # So does a device of a group (a shell-style pattern under devices:).
        llm.expect(Reply.text("Hello, little one."))
        grouped = await stack.enter_async_context(
            SimulatedDevice(ota_url=ota_url, mcp=False, device_id="02:00:00:00:6b:07")
        )
        await grouped.connect()
        await ask(grouped, "hi")
        assert llm.requests[3]["model"] == "kids-model" and system(llm, 3).startswith(KIDS_PROMPT)
        # `vixio profile` speaks to the supervisor's console too: cleared, the next turn is the default's.
        code, out, err = await vixio_profile(serve.base_url, "clear", device.device_id)
        assert code == 0 and out.startswith(f"cleared {device.device_id}'s assignment"), err
        llm.expect(Reply.text("Good evening."))
        await ask(device, "hello once more")
        assert llm.requests[4]["model"] == "test-model" and not system(llm, 4).startswith(KIDS_PROMPT)
        await serve.stop()


async def vixio_profile(base: str, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vixio",
        "profile",
        *args,
        "--url",
        base,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_cli_assigns_shows_and_clears_and_a_live_session_follows(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Hi kiddo."), Reply.text("Good evening."))
    server = await start(profiles_config(llm, tts, tmp_path))
    base = f"http://127.0.0.1:{server.ota.port}"
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=ADULT) as device:
            await device.connect()
            code, out, _ = await vixio_profile(base, "assign", ADULT, "kids")
            assert code == 0 and out.strip() == (
                f"assigned kids to {ADULT}; 1 live session(s) switch at their next turn"
            )
            code, out, _ = await vixio_profile(base, "show", ADULT)
            assert code == 0 and out.splitlines()[:2] == [
                f"{ADULT}: kids (assigned at run time)",
                "  assigned: kids; devices: gives default",
            ]
            code, out, _ = await vixio_profile(base, "list")
            assert code == 0 and f"  {ADULT:<20} default (default) -> kids at the next turn" in out.splitlines()
            assert "  aa:bb:cc:00:00:01    kids" in out.splitlines()
            await ask(device, "hello")
            code, out, _ = await vixio_profile(base, "clear", ADULT)
            assert code == 0 and out.startswith(f"cleared {ADULT}'s assignment: it gets default (default)")
            await ask(device, "hello again")
            code, _, err = await vixio_profile(base, "assign", ADULT, "kidz")
            assert code == 2 and "404: no profile 'kidz'" in err
    finally:
        await server.stop()
    assert [llm.requests[n]["model"] for n in range(2)] == ["kids-model", "house-model"]
    assert [r.voice for r in tts.requests] == ["nova", "alloy"]


async def test_forgetting_by_voice_ends_the_assignment_at_the_next_turn(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Hi kiddo."), Reply.text("Good evening."))
    server = await start(profiles_config(llm, tts, tmp_path))
    try:
        await server.store.assign_profile(ADULT, "kids")
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=ADULT) as device:
            await device.connect()
            await ask(device, "hello")
            await ask(device, "Forget everything about me!")
            await ask(device, "yes")
            assert await server.store.assigned_profile(ADULT) is None
            await ask(device, "hello again")
    finally:
        await server.stop()
    assert [llm.requests[n]["model"] for n in range(2)] == ["kids-model", "house-model"]
    assert conversation(llm, 1) == [("user", "hello again")]


async def test_forgetting_in_the_console_ends_the_assignment_at_the_next_turn(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    llm.expect(Reply.text("Hi kiddo."), Reply.text("Good evening."))
    server = await start(profiles_config(llm, tts, tmp_path))
    base = f"http://127.0.0.1:{server.ota.port}"
    try:
        await server.store.assign_profile(ADULT, "kids")
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=ADULT) as device:
            await device.connect()
            await ask(device, "hello")
            status, body = await post(base, f"/api/devices/{ADULT}/forget", {})
            assert status == 200 and body["live_sessions_updated"] == 1, body
            assert await server.store.assigned_profile(ADULT) is None
            await ask(device, "hello again")
    finally:
        await server.stop()
    assert [llm.requests[n]["model"] for n in range(2)] == ["kids-model", "house-model"]
    assert conversation(llm, 1) == [("user", "hello again")]
