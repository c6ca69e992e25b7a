"""The facts part of the `Store` contract, on SQLite and a real redis-server: merged by key, kept
per person, deleted one by one or all, listed with the device, erased by `forget_device`."""

from __future__ import annotations

import time

import pytest

from vixio.state.facts import Fact
from vixio.state.store import Store

from .conftest import StoreFactory

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"
OTHER = "02:00:00:00:00:01"


def fact(key: str, value: str, *, person: str = "", kind: str = "like", at: float = 0.0) -> Fact:
    return Fact(DEVICE, person, key, kind, value, at or time.time(), "rules")  # type: ignore[arg-type]


async def test_facts_are_updated_by_key_not_appended(store: Store) -> None:
    await store.put_facts(DEVICE, [fact("name", "Alice", kind="name", at=100.0), fact("like:green tea", "green tea")])
    await store.put_facts(DEVICE, [fact("name", "Alicia", kind="name", at=200.0)])
    facts = await store.facts(DEVICE)
    assert sorted((f.key, f.value) for f in facts) == [("like:green tea", "green tea"), ("name", "Alicia")]
    assert next(f for f in facts if f.key == "name").at == pytest.approx(200.0)  # the source time moves on
    assert await store.facts(OTHER) == []


async def test_a_merge_drops_and_puts_in_one_call(store: Store, open_client: StoreFactory) -> None:
    await store.put_facts(DEVICE, [fact("like:tea", "tea")])
    await store.put_facts(DEVICE, [fact("like:coffee", "coffee")], drop=[("", "like:tea")])
    other = await open_client()  # another worker or instance sees the merge whole
    assert [(f.key, f.value, f.source) for f in await other.facts(DEVICE)] == [("like:coffee", "coffee", "rules")]


async def test_facts_are_kept_per_person_and_forgotten_per_person(store: Store) -> None:
    await store.put_facts(
        DEVICE,
        [
            fact("name", "Alice", kind="name", person="alice"),
            fact("name", "Bob", kind="name", person="bob"),
            fact("like:tea", "tea"),
        ],
    )
    assert [f.value for f in await store.facts(DEVICE, person="alice")] == ["Alice"]
    assert len(await store.facts(DEVICE)) == 3
    assert await store.forget_facts(DEVICE, person="bob") == 1
    assert sorted(f.person for f in await store.facts(DEVICE)) == ["", "alice"]
    assert await store.delete_facts(DEVICE, [("alice", "name"), ("alice", "nothing")]) == 1
    assert await store.forget_facts(DEVICE) == 1
    assert await store.facts(DEVICE) == []


async def test_devices_list_counts_facts_and_forget_device_erases_them(store: Store) -> None:
    await store.put_facts(DEVICE, [fact("like:tea", "tea"), fact("home", "Berlin", kind="home")])
    records = {r.device_id: r for r in await store.devices(10)}
    assert records[DEVICE].facts == 2 and records[DEVICE].turns == 0
    await store.forget_device(DEVICE)
    assert await store.facts(DEVICE) == []
    assert DEVICE not in {r.device_id for r in await store.devices(10)}


async def test_unicode_values_come_back_as_said(store: Store) -> None:
    await store.put_facts(DEVICE, [fact("like:绿茶", "绿茶", person="小明")])
    [kept] = await store.facts(DEVICE)
    assert (kept.person, kept.key, kept.value) == ("小明", "like:绿茶", "绿茶")
