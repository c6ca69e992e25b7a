"""The console against hostile input (issue 43) on a real server with a simulated device: deep JSON
on every route that reads a body, and device ids under the one rule."""

from __future__ import annotations

import time

import pytest

from tests.console.conftest import Live
from tests.transports.xiaozhi.hostile import captured_logs
from vixio.state.store import StoredTurn

TOKEN = "s3cret-token-for-tests"
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}
DEEP = "[" * 5000 + "]" * 5000
DERIVED = "aa:bb:cc:dd:ee:ff-and-a-long-claimed-name-of-52-chars~0123456789"
"""A 64-character id of the form a derived identity takes (`<claimed[:52]>~<10 hex>`)."""

BODY_ROUTES = ["/api/login", "/api/execute", "/api/parse", "/api/say", "/api/profiles/assign", "/api/profiles/clear",
               "/api/pairing/approve", "/api/pairing/revoke", "/api/devices/aa:bb:cc:dd:ee:ff/memory",
               "/api/devices/aa:bb:cc:dd:ee:ff/turns/delete"]
"""Every console route that reads a JSON body (history/clear, forget and logout read none)."""


@pytest.mark.parametrize("live", [{"admin_token": TOKEN}], indirect=True)
async def test_deep_json_on_every_body_route_is_a_400_with_one_log_line(live: Live) -> None:
    async with captured_logs("INFO") as logs:
        for path in BODY_ROUTES:
            async with live.http.post(live.base + path, data=DEEP, headers=OPERATOR) as response:
                body = await response.json()
                assert response.status == 400, (path, body)
                assert "nested deeper than 64" in body["error"], (path, body)
    for path in BODY_ROUTES:
        assert len(logs.lines(f"POST {path} -> 400")) == 1, path
    assert logs.tracebacks() == []
    # A JSON-mode `arguments` text is held to the same depth.
    async with live.http.post(live.base + "/api/execute", json={"tool": "self.get_device_status", "arguments": DEEP},
                              headers=OPERATOR) as response:
        assert response.status == 400 and "nested deeper than 64" in (await response.json())["error"]


@pytest.mark.parametrize("live", [{"admin_token": TOKEN}], indirect=True)
async def test_a_64_character_id_opens_assigns_and_forgets(live: Live) -> None:
    assert len(DERIVED) == 64
    store = live.server.store
    await store.put_turn(DERIVED, StoredTurn("c1", 0, "hello", "Hi there.", at=time.time()))
    status, device = await live.get(f"/api/devices/{DERIVED}", headers=OPERATOR)
    assert status == 200 and [t["user"] for t in device["turns"]] == ["hello"], device
    status, profile = await live.get(f"/api/profiles/{DERIVED}", headers=OPERATOR)
    assert status == 200 and profile["device"] == DERIVED, profile
    status, assigned = await live.post("/api/profiles/clear", {"device": DERIVED}, headers=OPERATOR)
    assert status == 200, assigned
    status, forgotten = await live.post(f"/api/devices/{DERIVED}/forget", headers=OPERATOR)
    assert status == 200 and forgotten["forgotten"] is True
    assert await store.recent_turns(DERIVED, 10) == []


@pytest.mark.parametrize("live", [{"admin_token": TOKEN}], indirect=True)
async def test_ids_that_break_the_rule_are_refused_by_the_console(live: Live) -> None:
    for bad in ("aa%0Abb", "a" * 65, "aa%20bb"):
        status, body = await live.get(f"/api/devices/{bad}", headers=OPERATOR)
        assert status == 400 and "a device id is 1 to 64 characters" in body["error"], body
        status, body = await live.get(f"/api/profiles/{bad}", headers=OPERATOR)
        assert status == 400 and "a device id is 1 to 64 characters" in body["error"], body
    status, body = await live.post("/api/profiles/assign", {"device": "aa\nbb", "profile": None}, headers=OPERATOR)
    assert status == 400 and "'\\n'" in body["error"], body
