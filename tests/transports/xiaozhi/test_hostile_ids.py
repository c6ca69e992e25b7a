"""Device ids under one rule (vixio/core/device_ids.py) at every entry a device or peer controls,
against the real server on loopback: the WebSocket handshake (auth off and on), OTA, and a
registerTools companion's `mac_addr`. A newline never reaches a log line; an id is refused with
its reason, never cut."""

from __future__ import annotations

import json
from urllib.parse import quote

import aiohttp
import pytest
import websockets

from vixio.testing.device import SimulatedDevice
from vixio.testing.register_client import RegisterClient

from .conftest import ws_url
from .hostile import captured_logs

pytestmark = pytest.mark.integration

FORGED = "aa:bb:cc:dd:ee:ff\n00:00:00 | INFO | forged line"
LONG = "a" * 65
CLIENT = "0f3c1a2b-1111-4222-8333-444455556666"


async def _handshake_status(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(url, additional_headers=headers or {}):
            pass
    response = info.value.response
    return response.status_code, response.body.decode()


def _no_forged_lines(logs) -> None:  # type: ignore[no-untyped-def]
    for record in logs.records:
        assert "\n" not in record.message and "\n" not in str(record.extra.get("device", "")), record


@pytest.mark.parametrize("auth", [{}, {"enabled": True, "secret": "s3cret"}], ids=["auth-off", "auth-on"])
async def test_the_websocket_refuses_a_newline_or_a_65_character_id(make_server, auth) -> None:
    server = await make_server(auth=auth)
    async with captured_logs("DEBUG") as logs:
        status, reason = await _handshake_status(ws_url(server, f"/xiaozhi/v1/?device-id={quote(FORGED)}"))
        assert status == 400 and "'\\n'" in reason, reason
        status, reason = await _handshake_status(ws_url(server), {"Device-Id": LONG, "Client-Id": CLIENT})
        assert status == 400 and "65 characters long" in reason, reason
    assert server.transport.connections == {}
    _no_forged_lines(logs)


async def test_the_websocket_serves_a_64_character_id_as_given(make_server) -> None:
    server = await make_server()
    device_id = "x" * 52 + "~" + "0123456789" + "z"
    async with SimulatedDevice(ws_url=ws_url(server), device_id=device_id, mcp=False) as device:
        await device.connect()
        assert [c.device_id for c in server.transport.connections.values()] == [device_id]


async def test_ota_refuses_a_newline_or_a_65_character_id(make_server) -> None:
    server = await make_server()
    url = f"http://127.0.0.1:{server.ota.port}/xiaozhi/ota/"
    async with captured_logs("DEBUG") as logs, aiohttp.ClientSession() as http:
        for headers, body in (
            ({"Client-Id": CLIENT}, {"mac_address": FORGED, "uuid": CLIENT}),
            ({"Device-Id": LONG, "Client-Id": CLIENT}, {}),
        ):
            async with http.post(url, headers=headers, data=json.dumps(body)) as response:
                error = (await response.json())["error"]
                assert response.status == 400 and error.startswith("Device-Id (or the body's mac_address) refused"), (
                    error
                )
    _no_forged_lines(logs)


async def test_a_companion_whose_mac_addr_has_a_newline_is_refused(make_server) -> None:
    server = await make_server(pairing={"trust_mac": True})
    async with captured_logs("DEBUG") as logs:
        async with RegisterClient(ws_url(server)) as companion:
            reply = await companion.register(mac_addr="aa\nbb:cc:dd:ee:ff")
            assert "mac_addr must be a device's MAC" in reply["error"]["message"], reply
            assert all(not c.mac_addr for c in server.transport.register_clients.values())
    _no_forged_lines(logs)
