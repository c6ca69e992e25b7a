"""Every SQLite erase path leaves the words in no file (state.db, -wal, -shm read as bytes) once it
returns: forgetting a device (`vixio memory clear`, the console's Forget everything, the spoken
"forget everything" all call it), the `memory.history_days` prune, a deleted turn, a replaced
fact. Each case first checks the words are on disk, so it can fail."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vixio.state.facts import Fact
from vixio.state.sqlite import SqliteStore
from vixio.state.store import StoredTurn

from .erased import assert_in_no_file, occurrences

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"


async def opened(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "data" / "state.db")
    await store.open()
    return store


async def test_forgetting_a_device_leaves_its_words_in_no_file(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    try:
        for seq in range(30):
            await store.put_turn(
                DEVICE, StoredTurn("c", seq, f"my name is Alice ({seq})", "Hello Alice!", at=time.time())
            )
        await store.put_facts(DEVICE, [Fact(DEVICE, "", "name", "name", "Alice", time.time())])
        await store.set_memory(DEVICE, "The user is Alice.")
        await store.put_turn("02:00:00:00:00:01", StoredTurn("c", 0, "I am Bob", "Hi Bob", at=time.time()))
        assert sum(occurrences(store, "Alice").values()) > 0
        await store.forget_device(DEVICE)
        await assert_in_no_file(store, "Alice")
        assert sum(occurrences(store, "Bob").values()) > 0  # another device's words stay
        assert len(store.checkpoints) >= 3  # facts, history, memory: each erase truncated the WAL
    finally:
        await store.close()


async def test_the_history_days_prune_and_a_deleted_turn_leave_no_trace(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    try:
        old = time.time() - 40 * 86400
        for seq in range(20):
            await store.put_turn(DEVICE, StoredTurn("old", seq, f"I live in Springfield ({seq})", "OK.", at=old + seq))
        await store.put_turn(DEVICE, StoredTurn("new", 0, "my cat is Marigold", "Nice.", at=time.time()))
        await store.put_turn(DEVICE, StoredTurn("new", 1, "I like mangoes", "Yum.", at=time.time()))
        assert sum(occurrences(store, "Springfield").values()) > 0
        assert await store.prune_history(time.time() - 30 * 86400) == 20
        await assert_in_no_file(store, "Springfield")
        assert await store.delete_turn(DEVICE, "new", 0)
        await assert_in_no_file(store, "Marigold")
        assert [t.user for t in await store.recent_turns(DEVICE, 10)] == ["I like mangoes"]
    finally:
        await store.close()


async def test_a_replaced_fact_leaves_its_old_value_in_no_file(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    try:
        await store.put_facts(DEVICE, [Fact(DEVICE, "", "home", "home", "Springfield", time.time())])
        await store.put_facts(DEVICE, [Fact(DEVICE, "", "home", "home", "Shelbyville", time.time())])
        await assert_in_no_file(store, "Springfield")
        assert [f.value for f in await store.facts(DEVICE)] == ["Shelbyville"]
    finally:
        await store.close()
