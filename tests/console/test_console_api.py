"""The console's JSON API against a real server with a simulated device and a scripted LLM."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.console.conftest import Live, config
from vixio.app.server import VixioServer
from vixio.console import api as console_api
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration

VCP_BLOCK = """Sure, let me turn it down.
<<<[TOOL_REQUEST]>>>
tool_name:「始」self_audio_speaker_set_volume「末」,
volume:「始」30「末」,
request_id:「始」vol-1「末」
<<<[END_TOOL_REQUEST]>>>"""

XML_BLOCK = """Checking the time.
<function_calls>
<invoke name="get_time">
<parameter name="timezone">Europe/Paris</parameter>
</invoke>
</function_calls>"""


def calls(live: Live) -> list[dict[str, Any]]:
    return [r for r in live.device.mcp_requests if r.get("method") == "tools/call"]


async def test_sessions_list_the_device(live: Live) -> None:
    status, body = await live.get("/api/sessions")
    assert status == 200
    (session,) = body["sessions"]
    assert session["session_id"] == live.session_id
    assert session["device_id"] == live.device.device_id
    assert session["state"] in ("idle", "listening")
    assert abs(session["connected_at"] - time.time()) < 60
    assert session["tools"] >= 5


@pytest.mark.parametrize(
    "live",
    [{"tools": {"toggles": {"self.get_device_status": False}, "timeouts": {"self.audio_speaker.*": 5}}}],
    indirect=True,
)
async def test_discovery_shows_device_and_process_tools(live: Live) -> None:
    status, body = await live.get(f"/api/tools?session={live.session_id}")
    assert status == 200
    tools = {tool["original_name"]: tool for tool in body["tools"]}
    volume = tools["self.audio_speaker.set_volume"]
    assert volume["name"] == "self_audio_speaker_set_volume"
    assert volume["source"] == "device" and volume["scope"] == "session"
    assert volume["parameters"]["properties"]["volume"]["type"] == "integer"
    assert volume["parameter_count"] == 1 and volume["required"] == ["volume"]
    assert volume["enabled"] and volume["sub_type"] == "query" and volume["timeout"] == 5
    assert not volume["confirmation"] and not volume["async"]
    assert tools["get_time"]["scope"] == "process" and tools["get_time"]["source"] == "local"
    # A tool the policy turns off is listed, as not offered to the model.
    assert tools["self.get_device_status"]["enabled"] is False
    assert tools["self.get_device_status"]["name"] == "self.get_device_status"  # it has no public name

    status, body = await live.get("/api/tools")
    assert status == 200
    assert {tool["name"] for tool in body["tools"]} >= {"get_time", "get_date"}
    assert not any(tool["source"] == "device" for tool in body["tools"])


async def test_execute_runs_on_the_device_through_the_executor(live: Live) -> None:
    status, body = await live.post(
        "/api/execute",
        {"session": live.session_id, "tool": "self_audio_speaker_set_volume", "arguments": {"volume": "30"}},
    )
    assert status == 200, body
    assert body["success"] and body["status"] == "completed" and body["result"] == "true"
    assert body["arguments"] == {"volume": 30}  # coerced by the schema, as for the agent
    assert body["original_name"] == "self.audio_speaker.set_volume" and body["ms"] >= 0
    (call,) = calls(live)
    assert call["params"] == {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}}
    assert live.device.status.volume == 30

    # The original name works too; validation errors come back as the model would see them.
    status, body = await live.post(
        "/api/execute",
        {"session": live.session_id, "tool": "self.audio_speaker.set_volume", "arguments": {"volume": 500}},
    )
    assert status == 200 and not body["success"] and "volume" in body["error"]
    assert len(calls(live)) == 1
    status, body = await live.post("/api/execute", {"session": live.session_id, "tool": "self_fly", "arguments": {}})
    assert not body["success"] and "there is no tool named self_fly" in body["error"]
    # JSON mode may send the arguments as text.
    status, body = await live.post(
        "/api/execute",
        {"session": live.session_id, "tool": "self_audio_speaker_set_volume", "arguments": '{"volume": 45}'},
    )
    assert body["success"] and live.device.status.volume == 45
    status, body = await live.post("/api/execute", {"session": live.session_id, "tool": "x", "arguments": "{oops"})
    assert status == 400 and "not JSON" in body["error"]

    # Without a session: the process-wide tools.
    status, body = await live.post("/api/execute", {"tool": "get_time", "arguments": {}})
    assert status == 200 and body["success"] and body["session_id"] is None

    # The console's calls show in the session's conversation, marked as the console's.
    status, detail = await live.get(f"/api/sessions/{live.session_id}")
    console_calls = detail["console_calls"]
    assert [c["by"] for c in console_calls] == ["console"] * 4
    assert not any(turn["tools"] for turn in detail["conversation"])
    assert console_calls[0]["arguments"] == {"volume": 30} and console_calls[0]["ms"] >= 0


async def test_bad_requests(live: Live) -> None:
    status, body = await live.get("/api/sessions/nope")
    assert status == 404 and "no live session" in body["error"]
    status, body = await live.post("/api/execute", {"session": "nope", "tool": "get_time"})
    assert status == 404
    status, body = await live.post("/api/execute", {"tool": "a" * 300})
    assert status == 400
    status, body = await live.post("/api/say", {"session": live.session_id, "text": "x" * 1001})
    assert status == 400
    status, body = await live.post("/api/say", {"text": "hello"})
    assert status == 400 and "session" in body["error"]
    status, body = await live.post("/api/parse", {"text": "hi", "protocol": "json"})
    assert status == 400
    async with live.http.post(live.base + "/api/parse", data=b"[1, 2]") as response:
        assert response.status == 400 and "JSON object" in (await response.json())["error"]


async def test_say_gets_a_reply_shown_in_the_session(live: Live) -> None:
    live.llm.expect(
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": 20}, call_id="c1"),
        Reply.text("The volume is 20 now."),
    )
    mark = live.device.mark()
    status, body = await live.post("/api/say", {"session": live.session_id, "text": "Turn it down to 20."})
    assert status == 200 and body["wake_word"] is False
    await live.device.wait_for("tts", state="stop", after=mark, timeout=20)
    # The device got the text as `stt` and the spoken reply, like a typed utterance.
    assert any(m.type == "stt" and m.data.get("text") == "Turn it down to 20." for m in live.device.received[mark:])

    status, detail = await live.get(f"/api/sessions/{live.session_id}")
    assert status == 200
    (turn,) = [t for t in detail["conversation"] if t["heard"]]
    assert turn["heard"] == ["Turn it down to 20."] and turn["said"] == ["The volume is 20 now."]
    (call,) = turn["tools"]
    assert call["by"] == "agent" and call["arguments"] == {"volume": 20} and call["result"] == "true"
    assert list(turn["marks"])[:2] == ["agent_start", "llm_first_token"]
    assert detail["device"]["device_id"] == live.device.device_id
    assert detail["turns"] == 1


async def test_parse_vcp_xml_and_auto(live: Live) -> None:
    status, body = await live.post("/api/parse", {"text": VCP_BLOCK, "protocol": "vcp"})
    assert status == 200
    (request,) = body["requests"]
    assert request["tool"] == "self_audio_speaker_set_volume" and request["arguments"] == {"volume": "30"}
    assert request["request_id"] == "vol-1" and body["errors"] == []
    assert body["speech"].strip() == "Sure, let me turn it down."

    status, body = await live.post("/api/parse", {"text": XML_BLOCK, "protocol": "xml"})
    (request,) = body["requests"]
    assert request["tool"] == "get_time" and request["arguments"] == {"timezone": "Europe/Paris"}
    assert body["speech"].strip() == "Checking the time."

    status, body = await live.post("/api/parse", {"text": VCP_BLOCK + "\n" + XML_BLOCK})
    assert body["detected"] == ["vcp", "xml"] and [r["protocol"] for r in body["requests"]] == ["vcp", "xml"]
    # The wrong protocol finds nothing, and an unclosed block is an error, never spoken.
    status, body = await live.post("/api/parse", {"text": XML_BLOCK, "protocol": "vcp"})
    assert body["requests"] == []
    status, body = await live.post("/api/parse", {"text": VCP_BLOCK.rsplit("<<<", 1)[0]})
    assert body["errors"] and "not closed" in body["errors"][0]
    assert body["speech"].strip() == "Sure, let me turn it down."


async def test_event_stream_reports_changes(live: Live) -> None:
    async with live.http.get(live.base + "/api/events") as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")

        async def next_event() -> dict[str, Any]:
            while True:
                line = (await asyncio.wait_for(response.content.readline(), 10)).decode()
                if line.startswith("data: "):
                    return json.loads(line[6:])

        first = await next_event()
        assert [s["session_id"] for s in first["sessions"]] == [live.session_id]
        await live.post("/api/execute", {"session": live.session_id, "tool": "self_get_device_status", "arguments": {}})
        second = await next_event()  # only sent because something changed
        assert second["sessions"][0]["version"] != first["sessions"][0]["version"]


async def test_the_page_is_served_without_outside_resources(live: Live) -> None:
    async with live.http.get(live.base + "/console", allow_redirects=False) as response:
        assert response.status == 302 and response.headers["Location"] == "/console/"
    for name in ("", "console.js", "console.css"):
        async with live.http.get(live.base + "/console/" + name) as response:
            text = await response.text()
            assert response.status == 200
            assert "http://" not in text and "https://" not in text  # no CDN, no web fonts
    async with live.http.get(live.base + "/console/") as response:
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    async with live.http.get(live.base + "/console/..%2Fapi.py") as response:
        assert response.status == 404


@pytest.mark.parametrize("live", [{"admin_token": "s3cret-token-for-tests"}], indirect=True)
async def test_token_guards_the_api(live: Live) -> None:
    status, body = await live.get("/api/sessions")
    assert status == 401 and "operator token" in body["error"]
    status, info = await live.get("/api/console")
    assert info == {
        "operator": False,
        "token_configured": True,
        "local": True,
        "message": "type the operator token (xiaozhi.http.admin_token) to sign in",
    }
    status, body = await live.post("/api/login", {"token": "wrong"})
    assert status == 401
    status, body = await live.get("/api/sessions", headers={"Authorization": "Bearer s3cret-token-for-tests"})
    assert status == 200 and len(body["sessions"]) == 1
    status, body = await live.get("/api/sessions?token=s3cret-token-for-tests")
    assert status == 200

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        async with browser.post(live.base + "/api/login", json={"token": "s3cret-token-for-tests"}) as response:
            assert response.status == 200
            cookie = response.cookies["vixio_admin"]
            assert cookie["httponly"] and cookie["samesite"] == "Strict"
        async with browser.get(live.base + "/api/sessions") as response:
            assert response.status == 200
        # Another site's page cannot use the operator's cookie (nor anything else).
        async with browser.post(
            live.base + "/api/say",
            json={"session": live.session_id, "text": "hi"},
            headers={"Origin": "http://evil.example"},
        ) as response:
            assert response.status == 403
        async with browser.post(live.base + "/api/logout") as response:
            assert response.status == 200
        async with browser.get(live.base + "/api/sessions") as response:
            assert response.status == 401


async def test_without_a_token_only_this_machine(live: Live) -> None:
    status, body = await live.get("/api/sessions")
    assert status == 200
    status, body = await live.get("/api/sessions", headers={"X-Forwarded-For": "203.0.113.9"})
    assert status == 403 and "admin_token" in body["error"]
    status, info = await live.get("/api/console", headers={"X-Forwarded-For": "203.0.113.9"})
    assert info["operator"] is False and "only on the server's own machine" in info["message"]
    status, body = await live.post("/api/login", {"token": "anything"})
    assert status == 409


async def test_an_open_page_does_not_hold_the_shutdown(llm: ScriptedLLMServer) -> None:
    server = VixioServer(config(llm))
    await server.start()
    stopped = False
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{server.ota.port}/api/events") as response:
                assert (await response.content.readline()).startswith(b"event: sessions")
                started = time.monotonic()
                await asyncio.wait_for(server.stop(), 20)
                stopped = True
                assert time.monotonic() - started < 10  # aiohttp alone would wait 60 s for the stream
    finally:
        if not stopped:
            await server.stop()


async def test_event_streams_are_bounded(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console_api, "MAX_EVENT_STREAMS", 2)
    async with live.http.get(live.base + "/api/events") as first, live.http.get(live.base + "/api/events") as second:
        assert first.status == second.status == 200
        for response in (first, second):
            assert (await response.content.readline()).startswith(b"event: sessions")
        status, body = await live.get("/api/events")
        assert status == 503 and "at most 2" in body["error"]
    deadline = time.monotonic() + 10  # a closed page frees its slot once its stream notices
    while time.monotonic() < deadline:
        async with live.http.get(live.base + "/api/events") as response:
            if response.status == 200:
                break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("closed streams never freed their slots")


async def test_state_follows_the_turn(live: Live) -> None:
    live.llm.expect(Reply.text("Let me think... done.", delay=3.0))
    mark = live.device.mark()
    await live.post("/api/say", {"session": live.session_id, "text": "Think hard."})
    seen = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "thinking" not in seen:
        status, body = await live.get("/api/sessions")
        seen.append(body["sessions"][0]["state"])
        await asyncio.sleep(0.1)
    assert "thinking" in seen  # the model has not answered yet
    await live.device.wait_for("tts", state="stop", after=mark, timeout=20)
    status, body = await live.get("/api/sessions")
    assert body["sessions"][0]["state"] in ("idle", "listening")


async def test_a_local_entrys_own_timeout_in_the_process_wide_list_and_calls(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    tool_file = tmp_path / "slow_tools.py"
    tool_file.write_text(
        "import asyncio\n\n"
        "async def crawl(url: str) -> str:\n    '''Crawl a site.'''\n    return url\n\n"
        "async def stall() -> str:\n    '''Never answers in time.'''\n"
        "    await asyncio.sleep(10)\n    return 'late'\n"
    )
    server = VixioServer(
        config(
            llm,
            tools={
                "timeout": 30,
                "timeouts": {"renamed": 4},
                "local": [
                    {"function": f"{tool_file}:crawl", "timeout": 20},
                    {"function": f"{tool_file}:stall", "timeout": 0.3},
                    {"function": f"{tool_file}:crawl", "name": "renamed", "timeout": 20},  # `timeouts` wins
                ],
            },
        )
    )
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{server.ota.port}"
            async with http.get(base + "/api/tools") as response:
                tools = {tool["name"]: tool for tool in (await response.json())["tools"]}
            assert (tools["crawl"]["timeout"], tools["stall"]["timeout"]) == (20, 0.3)
            assert tools["renamed"]["timeout"] == 4 and tools["get_time"]["timeout"] == 30
            started = time.monotonic()
            async with http.post(base + "/api/execute", json={"tool": "stall", "arguments": {}}) as response:
                body = await response.json()
            assert not body["success"] and "did not answer within 0.3 s" in body["error"]
            assert time.monotonic() - started < 5
    finally:
        await server.stop()
