"""The console against hostile input (issue 43) on a real server with a simulated device: deep JSON
on every route that reads a body, device ids under the one rule, the wrong-token throttle of
`/api/login`, and `/metrics` refused to another site's page."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.console.conftest import Live
from tests.transports.xiaozhi.hostile import captured_logs
from vixio.state.store import StoredTurn
from vixio.transports.xiaozhi.http.admin import ADDRESS_BURST

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-tests"
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}
DEEP = "[" * 5000 + "]" * 5000
DERIVED = "aa:bb:cc:dd:ee:ff-and-a-long-claimed-name-of-52-chars~0123456789"
"""A 64-character id of the form a derived identity takes (`<claimed[:52]>~<10 hex>`)."""

BODY_ROUTES = [
    "/api/login",
    "/api/execute",
    "/api/parse",
    "/api/say",
    "/api/profiles/assign",
    "/api/profiles/clear",
    "/api/pairing/approve",
    "/api/pairing/revoke",
    "/api/devices/aa:bb:cc:dd:ee:ff/memory",
    "/api/devices/aa:bb:cc:dd:ee:ff/turns/delete",
]
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
    async with live.http.post(
        live.base + "/api/execute", json={"tool": "self.get_device_status", "arguments": DEEP}, headers=OPERATOR
    ) as response:
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


@pytest.mark.parametrize("live", [{"admin_token": TOKEN, "max_connections_per_address": 0}], indirect=True)
async def test_parallel_wrong_logins_are_throttled_and_a_right_one_from_elsewhere_is_fast(live: Live) -> None:
    async def login(http: aiohttp.ClientSession, token: str) -> int:
        async with http.post(live.base + "/api/login", json={"token": token}) as response:
            return response.status

    async with captured_logs("WARNING") as logs:
        statuses = await asyncio.gather(*(login(live.http, f"guess-{i}") for i in range(100)))
    # Only the first few were checked at all; the rest were refused unchecked.
    assert statuses.count(401) == ADDRESS_BURST and statuses.count(429) == 100 - ADDRESS_BURST, statuses
    assert len(logs.lines("refused", "WARNING")) == 1  # one line for the burst, not 95
    assert await login(live.http, TOKEN) == 429  # this address waits, whatever it sends

    # The operator on another address is let in at once.
    other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=other) as operator:
        started = time.perf_counter()
        assert await login(operator, TOKEN) == 200
        assert time.perf_counter() - started < 0.4


@pytest.mark.parametrize("live", [{"admin_token": TOKEN}], indirect=True)
async def test_metrics_refuse_another_sites_page_even_with_the_token(live: Live) -> None:
    for path in ("/metrics", "/metrics.json"):
        async with live.http.get(live.base + path, headers={**OPERATOR, "Origin": "http://evil.example"}) as response:
            assert response.status == 403 if path == "/metrics" else response.status == 200
            if path == "/metrics.json":  # the public count only, no device ids
                assert (await response.json())["detail"] == []
        async with live.http.get(live.base + path, headers=OPERATOR) as response:
            assert response.status == 200
