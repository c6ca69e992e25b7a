"""Companion approvals in the state store (vixio/transports/xiaozhi/companions/stored.py): what the transport's
PairingStore promises, across two processes' views of one store (both backends), and the JSON file
imported once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from vixio.state.sqlite import SqliteStore
from vixio.state.store import StoreWriteError
from vixio.transports.xiaozhi.companions.store import CompanionKey
from vixio.transports.xiaozhi.companions.stored import StorePairings

from .conftest import StoreFactory

pytestmark = pytest.mark.integration

KEY = CompanionKey("robot-a", "client-a", "aa:bb:cc:dd:ee:ff")


async def opened(path: Path, **kwargs: float) -> SqliteStore:
    store = SqliteStore(path, **kwargs)
    await store.open()
    return store


async def test_an_approval_is_seen_by_the_other_process_after_sync_and_so_is_its_revocation(
    open_client: StoreFactory,
) -> None:
    supervisor_store, worker_store = await open_client(), await open_client()
    supervisor, worker = StorePairings(supervisor_store), StorePairings(worker_store)
    await supervisor.load(import_legacy=True)
    await worker.load()
    approval = supervisor.approve(KEY)
    assert supervisor.is_approved(KEY) and supervisor.approve(KEY) == approval
    await supervisor.sync()
    assert not worker.is_approved(KEY)  # until it is told
    await worker.sync()
    assert worker.is_approved(KEY) and [a.key for a in worker.approvals()] == [KEY]
    assert not worker.is_approved(CompanionKey("robot-a", "other-client", KEY.mac))
    revoked = supervisor.revoke(KEY.id)
    assert revoked is not None and revoked.key == KEY and supervisor.revoke(KEY.id) is None
    await supervisor.sync()
    await worker.sync()
    assert not worker.is_approved(KEY)
    restarted = StorePairings(supervisor_store)
    await restarted.load()
    assert restarted.approvals() == []


async def test_the_json_file_of_the_first_release_is_imported_once(tmp_path: Path) -> None:
    legacy = tmp_path / "pairings.json"
    legacy.write_text(
        json.dumps(
            {
                "approved": [
                    {"companion": "Robot-A", "client_id": "client-a", "mac": "AA-BB-CC-DD-EE-FF", "approved_at": 1}
                ]
            }
        )
    )
    store = await opened(tmp_path / "s.db")
    try:
        pairings = StorePairings(store, legacy)
        await pairings.load(import_legacy=True)
        assert pairings.is_approved(KEY)
        assert not legacy.exists() and (tmp_path / "pairings.json.imported").exists()
        worker = StorePairings(store, legacy)
        await worker.load()
        assert worker.is_approved(KEY)
    finally:
        await store.close()


async def test_an_unreadable_json_file_names_itself(tmp_path: Path) -> None:
    legacy = tmp_path / "pairings.json"
    legacy.write_text("{not json")
    store = await opened(tmp_path / "s.db")
    try:
        with pytest.raises(ValueError, match="pairing.state_file .*pairings.json: unreadable"):
            await StorePairings(store, legacy).load(import_legacy=True)
        assert legacy.exists()
    finally:
        await store.close()


async def test_an_approval_the_store_cannot_keep_fails_and_is_undone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await opened(path, lock_timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        pairings = StorePairings(store)
        await pairings.load()
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        pairings.approve(KEY)
        with pytest.raises(StoreWriteError, match="locked by another process"):
            await pairings.sync()
        assert not pairings.is_approved(KEY)
    finally:
        holder.close()
        await store.close()
