"""DNS rebinding (issue 25 §2): operator routes answer only a `Host` that names this server.

A page at evil.example that rebinds its name to 127.0.0.1 sends same-origin requests from the
operator's browser: `Host` and `Origin` both say evil.example, the socket says loopback. These
tests send exactly that over real sockets (the issue's curl reproduction) to a real server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.console.conftest import Live, config
from tests.transports.xiaozhi.hostile import captured_logs
from vixio.app.server import VixioServer
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve, until

pytestmark = pytest.mark.process

DEVICE_HEADERS = {"Device-Id": "aa:bb:cc:dd:ee:01", "Client-Id": "rebinding-test", "Content-Type": "application/json"}


async def raw(port: int, method: str, path: str, host: str, body: bytes = b"", **headers: str) -> tuple[int, Any]:
    """One HTTP/1.1 request with exactly these headers (as curl sends them); (status, JSON body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(payload) if payload else None
    except ValueError:
        return status, payload.decode(errors="replace")


def rebinding(port: int) -> dict[str, str]:
    """The headers of a rebinding page's same-origin request: its own name, its own origin."""
    return {"Origin": f"http://evil.example:{port}", "Content_Type": "text/plain"}


async def test_a_rebinding_page_cannot_make_the_device_speak_or_read_anything(live: Live) -> None:
    """No operator token (the household default): the issue's curl reproduction is refused."""
    port, session = live.server.ota.port, live.session_id
    evil = f"evil.example:{port}"
    mark = live.device.mark()
    say = json.dumps({"session": session, "text": "hello"}).encode()
    status, body = await raw(port, "POST", "/api/say", evil, say, **rebinding(port))
    assert status == 403 and "does not name this server" in body["error"], (status, body)
    execute = json.dumps({"session": session, "tool": "self.audio_speaker.set_volume", "arguments": {"volume": 5}})
    async with captured_logs("INFO") as logs:
        for method, path, payload in (
            ("GET", "/api/sessions", b""),
            ("POST", "/api/execute", execute.encode()),
            ("GET", f"/api/sessions/{session}", b""),
            ("GET", "/metrics", b""),
            ("GET", "/api/events", b""),
            ("GET", "/console/", b""),
            ("POST", "/xiaozhi/ota/activate/confirm", b'{"code": "123456"}'),
        ):
            status, body = await raw(port, method, path, evil, payload, **rebinding(port))
            assert status == 403, (path, status, body)
            assert live.device.device_id not in json.dumps(body)
    # Eight refusals in all (with /api/say above): the first three are logged, then one a minute.
    assert len(logs.lines("not a name of this server", "WARNING")) == 2
    await asyncio.sleep(0.5)
    assert [m for m in live.device.received[mark:] if m.type in ("stt", "tts")] == []
    assert [r for r in live.device.mcp_requests if r.get("method") == "tools/call"] == []

    # The same requests addressed to this server's own names are answered.
    live.llm.expect(Reply.text("Hello from the console."))
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        status, body = await raw(port, "GET", "/api/sessions", host)
        assert status == 200 and body["sessions"][0]["device_id"] == live.device.device_id
    status, body = await raw(
        port, "POST", "/api/say", f"127.0.0.1:{port}", say, Origin=f"http://127.0.0.1:{port}", Content_Type="text/plain"
    )
    assert status == 200, body
    await live.device.wait_for("tts", state="stop", after=mark, timeout=20)


async def test_device_routes_still_answer_any_host(live: Live) -> None:
    """Devices may be given any name for the server: OTA and health do not check Host, and the
    URL OTA hands out does not echo the foreign name."""
    port = live.server.ota.port
    status, body = await raw(
        port,
        "POST",
        "/xiaozhi/ota/",
        "voice.example.net:8003",
        b"{}",
        Device_Id=DEVICE_HEADERS["Device-Id"],
        Client_Id=DEVICE_HEADERS["Client-Id"],
    )
    assert status == 200 and body["websocket"]["url"].startswith("ws://127.0.0.1:")
    status, body = await raw(port, "GET", "/healthz", "evil.example")
    assert status == 200 and body == {"status": "ok"}


@pytest.mark.parametrize("live", [{"admin_token": "s3cret-token-for-tests"}], indirect=True)
async def test_with_a_token_the_host_is_still_checked(live: Live) -> None:
    port = live.server.ota.port
    bearer = {"Authorization": "Bearer s3cret-token-for-tests"}
    status, _ = await raw(port, "GET", "/api/sessions", f"evil.example:{port}", **bearer)
    assert status == 403
    # A rebinding page cannot try tokens at the login route either.
    status, _ = await raw(port, "POST", "/api/login", f"evil.example:{port}", b'{"token": "guess"}', **rebinding(port))
    assert status == 403
    status, body = await raw(port, "GET", "/api/sessions", f"127.0.0.1:{port}", **bearer)
    assert status == 200 and len(body["sessions"]) == 1
    status, _ = await raw(port, "GET", "/api/sessions", f"127.0.0.1:{port}")
    assert status == 401


async def test_allowed_hosts_and_the_public_url_name_this_server(llm: ScriptedLLMServer) -> None:
    settings = config(llm)
    settings.xiaozhi.allowed_hosts = ["voice.lan"]
    settings.xiaozhi.public_url = "wss://voice.example.com/xiaozhi/v1/"
    server = VixioServer(settings)
    await server.start()
    try:
        port = server.ota.port
        for host in ("voice.lan", f"VOICE.LAN:{port}", "voice.example.com", "[::1]:8003"):
            status, body = await raw(port, "GET", "/api/sessions", host)
            assert status == 200, (host, body)
        for host in ("voice.lan.evil.example", "example.com", "10.9.8.7", "", "a" * 300):
            status, body = await raw(port, "GET", "/api/sessions", host)
            assert status == 403, (host, body)
    finally:
        await server.stop()


@pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")
async def test_workers_refuse_the_rebinding_request_too(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    """`vixio serve --workers 2`: the supervisor answers the HTTP port for every worker."""
    serve = await start_serve(tmp_path, llm, "--workers", "2")
    try:
        await serve.wait_ready()
        port = int(serve.ota_url.split(":")[2].split("/")[0])
        async with (
            aiohttp.ClientSession() as http,
            http.post(serve.ota_url, headers=DEVICE_HEADERS, data="{}") as reply,
        ):
            ws_url = (await reply.json())["websocket"]["url"]
        async with SimulatedDevice(
            ws_url=ws_url, device_id=DEVICE_HEADERS["Device-Id"], listening_mode="manual"
        ) as device:
            await device.connect()

            async def session() -> str | None:
                status, body = await raw(port, "GET", "/api/sessions", f"127.0.0.1:{port}")
                return body["sessions"][0]["session_id"] if status == 200 and body["sessions"] else None

            session_id = await until(session, 30, "the device's session")
            mark = device.mark()
            say = json.dumps({"session": session_id, "text": "hello"}).encode()
            status, body = await raw(port, "POST", "/api/say", f"evil.example:{port}", say, **rebinding(port))
            assert status == 403, body
            for path in ("/api/sessions", "/metrics"):
                status, body = await raw(port, "GET", path, f"evil.example:{port}", **rebinding(port))
                assert status == 403 and DEVICE_HEADERS["Device-Id"] not in json.dumps(body)
            await asyncio.sleep(0.5)
            assert [m for m in device.received[mark:] if m.type in ("stt", "tts")] == []
            llm.expect(Reply.text("Hello from the console."))
            status, body = await raw(port, "POST", "/api/say", f"127.0.0.1:{port}", say)
            assert status == 200, body
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
    finally:
        await serve.stop()
    assert "Traceback" not in serve.text()
