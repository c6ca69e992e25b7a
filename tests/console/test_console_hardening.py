"""The console against hostile input (issue 43) on a real server with a simulated device: device
ids under the one rule."""

from __future__ import annotations

import time

import pytest

from tests.console.conftest import Live
from vixio.state.store import StoredTurn

TOKEN = "s3cret-token-for-tests"
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}
DERIVED = "aa:bb:cc:dd:ee:ff-and-a-long-claimed-name-of-52-chars~0123456789"
"""A 64-character id of the form a derived identity takes (`<claimed[:52]>~<10 hex>`)."""


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
