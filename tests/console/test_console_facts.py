"""The Memory pane's facts against a real server, a real SQLite store and a simulated device: a
connected device with nothing stored is listed, empty; what the user says is listed as facts,
identity first; a fact edited and one deleted (with the turns that said it) reach the store, its
files and the live session's next instructions; after Forget everything the Sessions pane no
longer shows the live session's words."""

from __future__ import annotations

import pytest

from tests.console.conftest import Live
from tests.console.test_console_memory import said, system, turn, until_stored
from tests.state.erased import assert_in_no_file
from vixio.memory.forget import ASK, DONE

pytestmark = pytest.mark.integration


async def test_facts_listed_edited_and_deleted_one_by_one(live: Live) -> None:
    store, device = live.server.store, live.device.device_id
    status, listed = await live.get("/api/devices")
    assert status == 200, listed
    [row] = [r for r in listed["devices"] if r["device_id"] == device]
    assert row["live"] == [live.session_id] and row["turns"] == row["facts"] == 0  # connected, nothing stored
    status, detail = await live.get(f"/api/devices/{device}")
    assert status == 200 and detail["facts"] == [] and detail["turns"] == []

    await turn(live, "I like green tea", "Green tea is lovely.")
    await turn(live, "my name is Alice and I live in Berlin", "Hello Alice!")
    await until_stored(live, device, 2)
    status, detail = await live.get(f"/api/devices/{device}")
    assert [(f["kind"], f["value"]) for f in detail["facts"]] == [
        ("name", "Alice"),
        ("home", "Berlin"),
        ("like", "green tea"),
    ]  # identity first

    status, body = await live.post(
        f"/api/devices/{device}/facts/edit", {"person": "", "key": "home", "value": "Munich"}
    )
    assert status == 200 and body["fact"]["value"] == "Munich" and body["live_sessions_updated"] == 1, body
    status, body = await live.post(f"/api/devices/{device}/facts/delete", {"person": "", "key": "like:green tea"})
    assert status == 200 and body["turns_deleted"] == 1, body
    assert sorted(f.value for f in await store.facts(device)) == ["Alice", "Munich"]
    assert [t.user for t in await store.recent_turns(device, 10)] == ["my name is Alice and I live in Berlin"]
    await assert_in_no_file(store, "green tea")
    await assert_in_no_file(store, "Green tea is lovely")

    messages = await turn(live, "what do I drink?", "I do not know.")
    assert "green tea" not in system(messages).lower() and "I like green tea" not in said(messages)
    assert "- Lives in: Munich (" in system(messages) and "- Name: Alice (" in system(messages)

    status, body = await live.post(f"/api/devices/{device}/facts/delete", {"person": "", "key": "like:green tea"})
    assert status == 404 and "no fact" in body["error"]
    status, body = await live.post(f"/api/devices/{device}/facts/add", {"kind": "dislike", "value": "coffee"})
    assert status == 200 and body["fact"]["key"] == "dislike:coffee"
    status, body = await live.post(f"/api/devices/{device}/facts/add", {"kind": "nonsense", "value": "x"})
    assert status == 400 and "kind must be one of" in body["error"]
    status, body = await live.post(f"/api/devices/{device}/facts/edit", {"key": "name", "value": "x" * 121})
    assert status == 400 and "value must be" in body["error"]


async def test_forget_everything_empties_the_sessions_pane_too(live: Live) -> None:
    store, device = live.server.store, live.device.device_id
    await turn(live, "my name is Alice", "Hello Alice!")
    status, session = await live.get(f"/api/sessions/{live.session_id}")
    assert status == 200 and any("Alice" in " ".join(t["heard"]) for t in session["conversation"])
    status, body = await live.post(f"/api/devices/{device}/forget")
    assert status == 200 and body["forgotten"] is True
    status, session = await live.get(f"/api/sessions/{live.session_id}")
    assert status == 200 and "Alice" not in str(session["conversation"]), session["conversation"]
    assert await store.facts(device) == []
    await assert_in_no_file(store, "Alice")


async def test_forget_everything_by_voice_empties_the_sessions_pane_too(live: Live) -> None:
    await turn(live, "my name is Alice", "Hello Alice!")
    for text, answer in (("Forget everything about me", ASK["en"]), ("yes", DONE["en"])):
        mark = live.device.mark()
        await live.device.send_text(text)
        told = await live.device.wait_for("tts", state="sentence_start", after=mark, timeout=30)
        assert answer.startswith(told["text"])  # its first sentence
        await live.device.wait_for("tts", state="stop", after=mark, timeout=30)
    status, session = await live.get(f"/api/sessions/{live.session_id}")
    assert status == 200 and "Alice" not in str(session["conversation"]), session["conversation"]
