"""The OTA server on a real loopback port, spoken to the way the firmware speaks to it (§2.1)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web
from loguru import logger

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.state.sqlite import SqliteStore
from vixio.transports.xiaozhi.http.ota import OtaServer
from vixio.transports.xiaozhi.session.auth import DeviceAuthenticator, verify_token

pytestmark = pytest.mark.integration

if TYPE_CHECKING:
    from loguru import Record

DEVICE = "aa:bb:cc:dd:ee:ff"
CLIENT = "0f3c1a2b-1111-4222-8333-444455556666"
HEADERS = {
    "Activation-Version": "1",
    "Device-Id": DEVICE,
    "Client-Id": CLIENT,
    "User-Agent": "bread-compact-wifi/2.4.2",
    "Accept-Language": "zh-CN",
    "Content-Type": "application/json",
}
SYSTEM_INFO: dict[str, Any] = {
    "version": 2,
    "language": "zh-CN",
    "flash_size": 16777216,
    "minimum_free_heap_size": "123456",
    "mac_address": DEVICE,
    "uuid": CLIENT,
    "chip_model_name": "esp32s3",
    "chip_info": {"model": 9, "cores": 2, "revision": 2, "features": 18},
    "application": {
        "name": "xiaozhi",
        "version": "2.4.2",
        "compile_time": "Aug  8 2026T08:33:45Z",
        "idf_version": "v5.4",
        "elf_sha256": "0" * 64,
    },
    "partition_table": [{"label": "nvs", "type": 1, "subtype": 2, "address": 36864, "size": 16384}],
    "ota": {"label": "ota_0"},
    "display": {"monochrome": False, "width": 240, "height": 240},
    "board": {
        "type": "bread-compact-wifi",
        "name": "bread-compact-wifi",
        "ssid": "MyWiFi",
        "rssi": -55,
        "ip": "192.168.1.23",
        "mac": DEVICE,
    },
}

StartServer = Callable[..., Awaitable[OtaServer]]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "state" / "state.db")
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def start_server(tmp_path: Path, store: SqliteStore) -> AsyncIterator[StartServer]:
    servers: list[OtaServer] = []

    async def start(websocket_port: int = 8000, **settings: Any) -> OtaServer:
        settings.setdefault("http", {"host": "127.0.0.1", "port": 0, "timezone_offset": 480})
        settings.setdefault("activation", {})
        settings["activation"].setdefault("state_file", str(tmp_path / "state" / "activations.json"))
        config = XiaozhiConfig.model_validate(settings)
        server = OtaServer(config, DeviceAuthenticator(config.auth), websocket_port=websocket_port, store=store)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post_ota(http: aiohttp.ClientSession, server: OtaServer, **kwargs: Any) -> tuple[int, Any]:
    kwargs.setdefault("headers", HEADERS)
    if "data" not in kwargs:
        kwargs["data"] = json.dumps(SYSTEM_INFO)
    async with http.post(server.url, **kwargs) as response:
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def test_firmware_request_gets_websocket_time_and_own_version(
    start_server: StartServer, http: aiohttp.ClientSession
) -> None:
    server = await start_server(websocket_port=8123)
    status, reply = await post_ota(http, server)
    assert status == 200
    assert set(reply) == {"server_time", "firmware", "websocket"}  # never `mqtt`, no `activation`
    assert reply["firmware"] == {"version": "2.4.2", "url": ""}
    assert reply["websocket"] == {"url": "ws://127.0.0.1:8123/xiaozhi/v1/", "token": ""}
    assert reply["server_time"]["timezone_offset"] == 480
    assert isinstance(reply["server_time"]["timestamp"], int) and reply["server_time"]["timestamp"] > 1_700_000_000_000


async def test_path_without_trailing_slash_and_unknown_version(
    start_server: StartServer, http: aiohttp.ClientSession
) -> None:
    server = await start_server()
    status, reply = await post_ota(http, server, data=json.dumps({"future_field": [1]}))
    assert status == 200 and reply["firmware"]["version"] == "0.0.0"
    async with http.post(server.url.rstrip("/"), headers=HEADERS, data="{}") as response:
        assert response.status == 200 and "websocket" in await response.json()


async def test_websocket_url_uses_host_the_device_dialled_and_callable_port(
    start_server: StartServer, http: aiohttp.ClientSession
) -> None:
    server = await start_server(websocket_port=lambda: 9001, allowed_hosts=["voice.lan"])
    _, reply = await post_ota(http, server, headers={**HEADERS, "Host": "localhost:8003"})
    assert reply["websocket"]["url"] == "ws://localhost:9001/xiaozhi/v1/"
    _, reply = await post_ota(http, server, headers={**HEADERS, "Host": "voice.lan:8003"})
    assert reply["websocket"]["url"] == "ws://voice.lan:9001/xiaozhi/v1/"


@pytest.mark.parametrize("host", ["192.168.1.10:8003", "evil.example", "evil.example:80", "[::2]:8003", "x" * 300])
async def test_a_host_header_naming_another_server_is_not_reflected(
    start_server: StartServer, http: aiohttp.ClientSession, host: str
) -> None:
    """Whoever can make a device's OTA request carry another Host must not redirect the device:
    the URL names the address the request arrived on (127.0.0.1 here)."""
    server = await start_server(websocket_port=9001)
    status, reply = await post_ota(http, server, headers={**HEADERS, "Host": host})
    assert status == 200 and reply["websocket"]["url"] == "ws://127.0.0.1:9001/xiaozhi/v1/"


async def test_public_url_overrides(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server(public_url="wss://voice.example.com/xiaozhi/v1/")
    _, reply = await post_ota(http, server)
    assert reply["websocket"]["url"] == "wss://voice.example.com/xiaozhi/v1/"


async def test_missing_device_id_is_400_json(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server()
    headers = {key: value for key, value in HEADERS.items() if key != "Device-Id"}
    body = {key: value for key, value in SYSTEM_INFO.items() if key != "mac_address"}
    status, reply = await post_ota(http, server, headers=headers, data=json.dumps(body))
    assert status == 400 and "Device-Id" in reply["error"]


async def test_body_ids_fill_in_for_missing_headers(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server()
    status, reply = await post_ota(http, server, headers={"Content-Type": "application/json"})
    assert status == 200 and "websocket" in reply


async def test_missing_client_id_is_400(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server()
    status, reply = await post_ota(http, server, headers={"Device-Id": DEVICE}, data="{}")
    assert status == 400 and "Client-Id" in reply["error"]


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '"text"', b"\xff\xfe{"])
async def test_bad_body_is_400_json(start_server: StartServer, http: aiohttp.ClientSession, body: str | bytes) -> None:
    server = await start_server()
    status, reply = await post_ota(http, server, data=body)
    assert status == 400 and "error" in reply and "websocket" not in reply


async def test_get_status_page_and_healthz(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server(websocket_port=8123)
    async with http.get(server.url) as response:
        assert response.status == 200 and response.content_type == "text/plain"
        assert "ws://127.0.0.1:8123/xiaozhi/v1/" in await response.text()
    async with http.get(server.url.replace("/xiaozhi/ota/", "/healthz")) as response:
        health = await response.json()
        # Public and minimal: nothing about auth, activation or URLs.
        assert response.status == 200 and health == {"status": "ok"}


async def test_cors_preflight(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server()
    async with http.options(
        server.url, headers={"Origin": "http://example.test", "Access-Control-Request-Method": "POST"}
    ) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert "Device-Id" in response.headers["Access-Control-Allow-Headers"]


async def test_extra_route_can_be_added_before_start(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    config = XiaozhiConfig.model_validate({"http": {"host": "127.0.0.1", "port": 0}})
    server = OtaServer(config, DeviceAuthenticator(config.auth))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="up 1")

    server.add_route("GET", "/metrics", metrics)
    await server.start()
    try:
        async with http.get(server.url.replace("/xiaozhi/ota/", "/metrics")) as response:
            assert await response.text() == "up 1"
        async with http.get(server.url.replace("/xiaozhi/ota/", "/nope")) as response:
            assert response.status == 404 and "error" in await response.json()
    finally:
        await server.stop()


async def test_auth_on_hands_out_a_token_that_verifies(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server(auth={"enabled": True, "secret": "s3cret", "token_ttl": 600})
    _, reply = await post_ota(http, server)
    token = reply["websocket"]["token"]
    assert token
    verify_token("s3cret", token, CLIENT, DEVICE, 600)


async def test_allow_listed_device_gets_empty_token(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server(auth={"enabled": True, "secret": "s3cret", "allowed_devices": [DEVICE.upper()]})
    _, reply = await post_ota(http, server)
    assert reply["websocket"]["token"] == ""


async def test_activation_flow(start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore) -> None:
    activation = {"enabled": True, "message": "Say {code} to the operator"}
    server = await start_server(activation=dict(activation))
    _, first = await post_ota(http, server)
    _, second = await post_ota(http, server)
    offer = first["activation"]
    assert set(first) == {"server_time", "firmware", "websocket", "activation"}
    assert len(offer["code"]) == 6 and offer["code"].isdigit()
    assert offer["message"] == f"Say {offer['code']} to the operator"
    assert offer["challenge"] and offer["timeout_ms"] > 0
    assert second["activation"]["code"] == offer["code"]  # same code until confirmed

    activate_url = server.url + "activate"
    async with http.post(activate_url, headers=HEADERS, data="{}") as response:
        assert response.status == 202
    async with http.post(
        activate_url + "/confirm", json={"code": "000000" if offer["code"] != "000000" else "111111"}
    ) as response:
        assert response.status == 404
    async with http.post(activate_url + "/confirm", json={"code": offer["code"]}) as response:
        assert response.status == 200 and (await response.json())["device_id"] == DEVICE
    async with http.post(activate_url, headers=HEADERS, data="{}") as response:
        assert response.status == 200

    _, after = await post_ota(http, server)
    assert "activation" not in after and "websocket" in after
    assert [(a.device_id, a.via) for a in await store.admissions()] == [(DEVICE, "activation")]

    # A restarted server (another process, the same state file) remembers the confirmation.
    await store.close()
    await store.open()
    restarted = await start_server(activation=dict(activation))
    _, reply = await post_ota(http, restarted)
    assert "activation" not in reply


async def test_the_json_file_of_earlier_versions_is_imported_once(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore, tmp_path: Path
) -> None:
    legacy = tmp_path / "activations.json"
    legacy.write_text(json.dumps({"confirmed": ["AA:BB:CC:DD:EE:FF", "02:00:00:00:00:01"]}))
    server = await start_server(activation={"enabled": True, "state_file": str(legacy)})
    assert not legacy.exists() and (tmp_path / "activations.json.imported").exists()
    assert sorted(a.device_id for a in await store.admissions()) == ["02:00:00:00:00:01", DEVICE]
    _, reply = await post_ota(http, server)
    assert "activation" not in reply  # confirmed in the old file: no code to show
    # The next start finds nothing left to import (and the operator may delete the .imported file).
    await start_server(activation={"enabled": True, "state_file": str(legacy)})
    assert len(await store.admissions()) == 2


async def test_a_confirmation_the_store_cannot_keep_is_503_and_the_code_stays_pending(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path, lock_timeout=0.2)
    await store.open()
    config = XiaozhiConfig.model_validate({"http": {"host": "127.0.0.1", "port": 0}, "activation": {"enabled": True}})
    server = OtaServer(config, DeviceAuthenticator(config.auth), store=store)
    await server.start()
    holder = sqlite3.connect(path, isolation_level=None)  # e.g. a backup tool holding the write lock
    try:
        _, reply = await post_ota(http, server)
        code = reply["activation"]["code"]
        holder.execute("BEGIN IMMEDIATE")
        async with http.post(server.url + "activate/confirm", json={"code": code}) as response:
            assert response.status == 503 and "locked by another process" in (await response.json())["error"]
        assert server.activations is not None and server.activations.pending(DEVICE).code == code
        holder.execute("ROLLBACK")
        async with http.post(server.url + "activate/confirm", json={"code": code}) as response:
            assert response.status == 200  # the same code, once the lock is gone
    finally:
        holder.close()
        await server.stop()
        await store.close()


async def test_confirm_refused_for_browser_origin_and_wrong_secret(
    start_server: StartServer, http: aiohttp.ClientSession
) -> None:
    server = await start_server(activation={"enabled": True}, auth={"enabled": True, "secret": "s3cret"})
    _, reply = await post_ota(http, server)
    code = reply["activation"]["code"]
    confirm_url = server.url + "activate/confirm"
    async with http.post(confirm_url, json={"code": code}, headers={"Origin": "http://evil.test"}) as response:
        assert response.status == 403 and "Access-Control-Allow-Origin" not in response.headers
    async with http.post(
        confirm_url, json={"code": code}, headers={"Origin": "http://x", "Authorization": "Bearer nope"}
    ) as response:
        assert response.status == 403
    async with http.post(
        confirm_url, json={"code": code}, headers={"Origin": "http://x", "Authorization": "Bearer s3cret"}
    ) as response:
        assert response.status == 200


async def test_every_request_logs_one_line_with_device_path_status(
    start_server: StartServer, http: aiohttp.ClientSession
) -> None:
    server = await start_server()
    records: list[Record] = []
    sink = logger.add(
        lambda message: records.append(message.record), level="INFO", filter="vixio.transports.xiaozhi.http.port"
    )
    try:
        # The device id comes from the body here, so the log line must show the resolved id.
        await post_ota(http, server, headers={"Content-Type": "application/json"})
        await post_ota(http, server, headers={}, data="{}")
    finally:
        logger.remove(sink)
    lines = [(r["extra"].get("device"), r["message"]) for r in records]
    assert len(lines) == 2
    assert lines[0][0] == DEVICE and "POST /xiaozhi/ota/ -> 200" in lines[0][1]
    assert lines[1][0] == "-" and "-> 400" in lines[1][1]


async def test_activate_is_200_when_activation_is_off(start_server: StartServer, http: aiohttp.ClientSession) -> None:
    server = await start_server()
    async with http.post(server.url + "activate", headers=HEADERS, data="{}") as response:
        assert response.status == 200
    async with http.post(server.url + "activate/confirm", json={"code": "123456"}) as response:
        assert response.status == 409


async def test_unreadable_state_file_names_the_file(tmp_path: Path, store: SqliteStore) -> None:
    state = tmp_path / "activations.json"
    state.write_text("{not json")
    config = XiaozhiConfig.model_validate(
        {"http": {"host": "127.0.0.1", "port": 0}, "activation": {"enabled": True, "state_file": str(state)}}
    )
    server = OtaServer(config, DeviceAuthenticator(config.auth), store=store)
    with pytest.raises(ValueError, match="activation.state_file .*activations.json"):
        await server.start()
    assert state.exists()  # left as it was, for the operator to fix


async def test_without_host_header_the_address_the_device_dialled_is_used(start_server: StartServer) -> None:
    # Bound to the wildcard and dialled at 127.0.0.2 (still loopback), so only the socket's local
    # address, not the bind address, can produce 127.0.0.2 in the reply.
    server = await start_server(websocket_port=8123, http={"host": "0.0.0.0", "port": 0})
    reader, writer = await asyncio.open_connection("127.0.0.2", server.port)
    body = b"{}"
    head = f"POST /xiaozhi/ota/ HTTP/1.0\r\nDevice-Id: {DEVICE}\r\nClient-Id: {CLIENT}\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    status_line, _, payload = response.partition(b"\r\n\r\n")
    assert b" 200 " in status_line.split(b"\r\n")[0]
    assert json.loads(payload)["websocket"]["url"] == "ws://127.0.0.2:8123/xiaozhi/v1/"
