"""The console's Memory pane API (vixio/console/memory.py) against a real server, a real SQLite
store and a simulated device: devices listed from the store (connected or not), a memory edited
and seen by the live session's next turn, one turn deleted, the history cleared, everything
forgotten; bounds and the operator token."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.console.conftest import Live
from vixio.state.store import StoredTurn
from vixio.testing.llm_server import Reply

pytestmark = pytest.mark.integration

AWAY = "02:00:00:00:00:aa"


async def turn(live: Live, text: str, reply: str) -> list[dict[str, Any]]:
    """One typed turn; the messages the model received for it."""
    live.llm.expect(Reply.text(reply))
    mark = live.device.mark()
    await live.device.send_text(text)
    await live.device.wait_for("tts", state="stop", after=mark, timeout=30)
    return live.llm.messages()


def system(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m["content"]) for m in messages if m["role"] == "system")


def said(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] in ("user", "assistant")]


async def until_stored(live: Live, device: str, count: int) -> None:
    for _ in range(100):
        if len(await live.server.store.recent_turns(device, 100)) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} turns of {device} never stored")


async def test_memory_and_history_seen_edited_and_followed_by_the_live_session(live: Live) -> None:
    store = live.server.store
    device = live.device.device_id
    now = time.time()
    await store.put_turn(AWAY, StoredTurn("old", 0, "I like trains", "Trains are great.", at=now - 3600))
    await store.set_memory(AWAY, "The user likes trains.")
    await turn(live, "my name is Alice", "Hello Alice!")
    await turn(live, "I like green tea", "Green tea is lovely.")
    await until_stored(live, device, 2)

    status, listed = await live.get("/api/devices")
    assert status == 200, listed
    rows = {row["device_id"]: row for row in listed["devices"]}
    assert rows[AWAY]["turns"] == 1 and rows[AWAY]["memory_chars"] == len("The user likes trains.")
    assert rows[AWAY]["live"] == [] and rows[device]["live"] == [live.session_id] and rows[device]["turns"] == 2
    assert listed["max_chars"] == 600 and listed["long_term"] == "facts" and listed["more"] is False
    status, page = await live.get("/api/devices", params={"limit": "1", "offset": "1"})
    assert (
        status == 200
        and len(page["devices"]) == 1
        and page["devices"][0]["device_id"] == listed["devices"][1]["device_id"]
        and page["more"] is False
    )

    status, away = await live.get(f"/api/devices/{AWAY}")
    assert status == 200 and away["memory"]["text"] == "The user likes trains." and away["live"] == []
    assert [(t["user"], t["assistant"]) for t in away["turns"]] == [("I like trains", "Trains are great.")]
    status, mine = await live.get(f"/api/devices/{device.upper()}", params={"turns": "1"})
    assert status == 200 and [t["user"] for t in mine["turns"]] == ["I like green tea"] and mine["memory"] is None

    # The memory an operator writes is in the live session's instructions from its next turn.
    status, body = await live.post(f"/api/devices/{device}/memory", {"text": "  The user is Alice; she drinks tea.  "})
    assert (
        status == 200 and body["memory"] == "The user is Alice; she drinks tea." and body["live_sessions_updated"] == 1
    )
    messages = await turn(live, "what do I drink?", "Tea.")
    assert "The user is Alice; she drinks tea." in system(messages)
    assert said(messages)[:4] == ["my name is Alice", "Hello Alice!", "I like green tea", "Green tea is lovely."]

    # One turn deleted: gone from the store and from what the model is sent.
    turns = (await live.get(f"/api/devices/{device}"))[1]["turns"]
    tea = next(t for t in turns if t["user"] == "I like green tea")
    status, body = await live.post(
        f"/api/devices/{device}/turns/delete", {"conversation": tea["conversation"], "seq": tea["seq"]}
    )
    assert status == 200 and body["live_sessions_updated"] == 1, body
    status, body = await live.post(
        f"/api/devices/{device}/turns/delete", {"conversation": tea["conversation"], "seq": tea["seq"]}
    )
    assert status == 404 and "no turn" in body["error"]
    messages = await turn(live, "what is my name?", "Alice.")
    assert "I like green tea" not in said(messages) and "Green tea is lovely." not in said(messages)
    assert said(messages)[:2] == ["my name is Alice", "Hello Alice!"]
    await until_stored(live, device, 3)
    assert "I like green tea" not in [t.user for t in await store.recent_turns(device, 100)]

    # The history cleared: the next turn starts from nothing, the memory stays.
    status, body = await live.post(f"/api/devices/{device}/history/clear")
    assert status == 200 and body["turns_deleted"] == 3 and body["live_sessions_updated"] == 1, body
    messages = await turn(live, "hello again", "Hello.")
    assert said(messages) == ["hello again"] and "she drinks tea" in system(messages)

    # Everything forgotten: no memory in the instructions, nothing stored.
    status, body = await live.post(f"/api/devices/{device}/forget")
    assert status == 200 and body["forgotten"] is True
    assert await store.memory(device) is None and await store.recent_turns(device, 100) == []
    messages = await turn(live, "who am I?", "I do not know.")
    assert said(messages) == ["who am I?"] and "Alice" not in system(messages)

    # An empty text clears a memory; a device that is not connected is edited all the same.
    status, body = await live.post(f"/api/devices/{AWAY}/memory", {"text": ""})
    assert status == 200 and body["live_sessions_updated"] == 0 and await store.memory(AWAY) is None


async def test_bad_requests_are_refused_with_what_was_expected(live: Live) -> None:
    device = live.device.device_id
    status, body = await live.post(f"/api/devices/{device}/memory", {"text": "x" * 601})
    assert status == 400 and "at most 600 (memory.max_chars)" in body["error"]
    assert await live.server.store.memory(device) is None
    status, body = await live.post(f"/api/devices/{device}/memory", {"text": 5})
    assert status == 400 and "text must be a string" in body["error"]
    status, body = await live.get("/api/devices", params={"limit": "100000"})
    assert status == 400 and "limit must be a whole number from 0 to 200" in body["error"]
    status, body = await live.get(f"/api/devices/{device}", params={"turns": "-1"})
    assert status == 400 and "turns must be" in body["error"]
    status, body = await live.get("/api/devices/" + "a" * 65)
    assert status == 400 and "device id" in body["error"]
    status, body = await live.post(f"/api/devices/{device}/turns/delete", {"conversation": "c", "seq": "1"})
    assert status == 400 and "seq must be" in body["error"]
    status, body = await live.post(f"/api/devices/{device}/forget", headers={"Origin": "http://evil.example"})
    assert status == 403


@pytest.mark.parametrize("live", [{"admin_token": "s3cret-token-for-tests"}], indirect=True)
async def test_memory_routes_answer_only_operators(live: Live) -> None:
    device = live.device.device_id
    await live.server.store.set_memory(device, "keep me")
    for method, path in (
        ("GET", "/api/devices"),
        ("GET", f"/api/devices/{device}"),
        ("POST", f"/api/devices/{device}/memory"),
        ("POST", f"/api/devices/{device}/forget"),
        ("POST", f"/api/devices/{device}/history/clear"),
        ("POST", f"/api/devices/{device}/turns/delete"),
    ):
        async with live.http.request(method, live.base + path, json={"text": ""}) as response:
            assert response.status == 401, (method, path, await response.text())
    memory = await live.server.store.memory(device)
    assert memory is not None and memory.text == "keep me"
    status, body = await live.get(f"/api/devices/{device}", headers={"Authorization": "Bearer s3cret-token-for-tests"})
    assert status == 200 and body["memory"]["text"] == "keep me"
