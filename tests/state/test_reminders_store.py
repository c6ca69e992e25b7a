"""The reminder part of the `Store` contract, against SQLite and a real redis-server: bounds,
listing order, cancel, the claim (one winner among concurrent clients of the same store),
fired occurrences taken once, recurrence moving on, and notify clips expiring."""

from __future__ import annotations

import asyncio
import time

import pytest

from vixio.state.reminders import Reminder, next_occurrence, repeat_days
from vixio.state.store import Store

from .conftest import StoreFactory

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"
OTHER = "02:00:00:00:00:01"


async def test_reminders_are_bounded_listed_by_due_and_cancelled(store: Store) -> None:
    now = time.time()
    first = Reminder.once(DEVICE, "take your medicine", now + 60)
    second = Reminder.once(DEVICE, "call mum", now + 30, kind="timer")
    assert await store.put_reminder(first, per_device=2)
    assert await store.put_reminder(second, per_device=2)
    assert not await store.put_reminder(Reminder.once(DEVICE, "third", now + 90), per_device=2)
    assert await store.put_reminder(first.moved_to(now + 10), per_device=2)  # a replacement is not one more
    assert await store.put_reminder(Reminder.once(OTHER, "not mine", now + 5), per_device=2)
    mine = await store.reminders(DEVICE)
    assert [(r.text, r.kind) for r in mine] == [("take your medicine", "reminder"), ("call mum", "timer")]
    assert mine[0].due == pytest.approx(now + 10)
    assert [r.device_id for r in await store.reminders()] == [OTHER, DEVICE, DEVICE]
    assert await store.next_reminder_due() == pytest.approx(now + 5)
    assert await store.cancel_reminder(DEVICE, second.id)
    assert not await store.cancel_reminder(DEVICE, second.id)
    assert not await store.cancel_reminder(OTHER, first.id)  # another device's id cancels nothing
    assert [r.text for r in await store.reminders(DEVICE)] == ["take your medicine"]


async def test_a_due_reminder_is_claimed_by_exactly_one_client(store: Store, open_client: StoreFactory) -> None:
    now = time.time()
    due = Reminder.once(DEVICE, "take your medicine", now - 1)
    await store.put_reminder(due, per_device=20)
    await store.put_reminder(Reminder.once(DEVICE, "later", now + 3600), per_device=20)
    clients = [store, *[await open_client() for _ in range(3)]]
    seen = [await client.due_reminders(now, limit=10) for client in clients]
    assert all([r.id for r in found] == [due.id] for found in seen)
    wins = await asyncio.gather(
        *(client.fire_reminder(found[0], None, keep=16) for client, found in zip(clients, seen))
    )
    assert sorted(wins) == [False, False, False, True]
    assert [r.text for r in await store.reminders(DEVICE)] == ["later"]
    fired = await store.take_fired(DEVICE)
    assert [(f.reminder_id, f.text, f.due) for f in fired] == [(due.id, "take your medicine", due.due)]
    assert await store.take_fired(DEVICE) == []


async def test_a_repeating_reminder_moves_on_and_fired_ones_are_bounded(store: Store) -> None:
    now = time.time()
    daily = Reminder(Reminder.new_id(), DEVICE, "stretch", now - 5, repeat="daily", at="06:30", zone="Asia/Shanghai")
    await store.put_reminder(daily, per_device=20)
    following = daily.following(now)
    assert following is not None and now < following <= now + 86400
    assert await store.fire_reminder(daily, following, keep=2)
    assert not await store.fire_reminder(daily, following, keep=2)  # read before it moved: no second claim
    [moved] = await store.reminders(DEVICE)
    assert moved.due == pytest.approx(following) and moved.repeat == "daily"
    for offset in (1, 2):  # two more occurrences: the oldest of three goes
        occurrence = moved.moved_to(now - 100 + offset)
        await store.put_reminder(occurrence, per_device=20)
        assert await store.fire_reminder(occurrence, following, keep=2)
    fired = await store.take_fired(DEVICE)
    assert [f.due for f in fired] == [pytest.approx(now - 99), pytest.approx(now - 98)]


async def test_one_fired_occurrence_is_taken_by_one_caller(store: Store, open_client: StoreFactory) -> None:
    reminder = Reminder.once(DEVICE, "dinner is ready", time.time() - 1, kind="message")
    await store.put_reminder(reminder, per_device=20)
    assert await store.fire_reminder(reminder, None, keep=16)
    other = await open_client()
    occurrence = reminder.fired().occurrence
    taken = await asyncio.gather(
        store.take_fired(DEVICE, occurrence), other.take_fired(DEVICE, occurrence), other.take_fired(DEVICE)
    )
    assert sum(len(found) for found in taken) == 1


async def test_a_fired_occurrence_stays_until_its_claimer_says_it_was_delivered(
    store: Store, open_client: StoreFactory
) -> None:
    now = time.time()
    older = Reminder.once(DEVICE, "take your medicine", now - 60)
    newer = Reminder.once(DEVICE, "call mum", now - 30)
    for reminder in (newer, older):
        await store.put_reminder(reminder, per_device=20)
        assert await store.fire_reminder(reminder, None, keep=16)
    other = await open_client()
    claims = await asyncio.gather(
        store.claim_fired(DEVICE, now, until=now + 300), other.claim_fired(DEVICE, now, until=now + 300)
    )
    [winner] = [found for found in claims if found]  # one caller gets both, oldest first
    assert [f.text for f in winner] == ["take your medicine", "call mum"]
    assert await other.claim_fired(DEVICE, now + 299, until=now + 600) == []  # claimed, not gone
    # Not delivered (its session ended first): back for the next delivery at once.
    await store.settle_fired(DEVICE, [winner[1].occurrence], delivered=False)
    again = await other.claim_fired(DEVICE, now, until=now + 300, limit=5)
    assert [f.occurrence for f in again] == [winner[1].occurrence]
    await other.settle_fired(DEVICE, [winner[1].occurrence], delivered=True)
    # A claimer that never settles (it died): the occurrence is free again once the claim lapses.
    assert await store.claim_fired(DEVICE, now + 299, until=now + 600) == []
    lapsed = await store.claim_fired(DEVICE, now + 301, until=now + 600, occurrence=winner[0].occurrence)
    assert [f.text for f in lapsed] == ["take your medicine"]
    await store.settle_fired(DEVICE, [lapsed[0].occurrence], delivered=True)
    assert await store.claim_fired(DEVICE, now + 10_000, until=now + 10_300) == []
    assert await store.take_fired(DEVICE) == []


async def test_claims_are_bounded_and_one_occurrence_can_be_claimed_alone(store: Store) -> None:
    now = time.time()
    reminders = [Reminder.once(DEVICE, f"number {i}", now - 100 + i) for i in range(5)]
    for reminder in reminders:
        await store.put_reminder(reminder, per_device=20)
        assert await store.fire_reminder(reminder, None, keep=16)
    first = await store.claim_fired(DEVICE, now, until=now + 300, limit=2)
    assert [f.text for f in first] == ["number 0", "number 1"]
    last = reminders[4].fired().occurrence
    assert [f.occurrence for f in await store.claim_fired(DEVICE, now, until=now + 300, occurrence=last)] == [last]
    assert [f.text for f in await store.claim_fired(DEVICE, now, until=now + 300)] == ["number 2", "number 3"]
    # Forgetting takes claimed ones too.
    assert len(await store.take_fired(DEVICE)) == 5
    assert await store.claim_fired(DEVICE, now + 1000, until=now + 1300) == []


async def test_clips_are_served_until_they_expire_and_are_bounded(store: Store) -> None:
    now = time.time()
    audio = bytes(range(256)) * 40  # binary, not text
    await store.put_clip("token-a", audio, now + 0.4, keep=2)
    await store.put_clip("token-b", b"OggS b", now + 60, keep=2)
    assert await store.clip("token-a") == audio
    assert await store.clip("unknown") is None
    await asyncio.sleep(0.5)
    assert await store.clip("token-a") is None
    await store.put_clip("token-c", b"OggS c", now + 61, keep=2)
    await store.put_clip("token-d", b"OggS d", now + 62, keep=2)
    assert await store.clip("token-b") is None  # past `keep`, the oldest went
    assert await store.clip("token-d") == b"OggS d"


def test_weekday_recurrence_follows_its_zone() -> None:
    assert repeat_days("weekdays") == (0, 1, 2, 3, 4)
    assert repeat_days("Mon, wed,FRI") == (0, 2, 4)
    with pytest.raises(ValueError, match="weekdays"):
        repeat_days("sometimes")
    friday_evening = 1764288000.0 + 12 * 3600  # 2025-11-28 12:00 UTC, a Friday: 20:00 in Shanghai
    following = next_occurrence((0, 1, 2, 3, 4), "06:30", "Asia/Shanghai", friday_evening)
    assert following == 1764288000.0 + 2 * 86400 + 22.5 * 3600  # Monday 06:30 CST = Sunday 22:30 UTC


async def test_forgetting_a_device_erases_its_reminders_and_fired_ones(store: Store) -> None:
    now = time.time()
    fired = Reminder.once(DEVICE, "fired while away", now - 5)
    await store.put_reminder(fired, per_device=20)
    assert await store.fire_reminder(fired, None, keep=16)
    await store.put_reminder(Reminder.once(DEVICE, "later", now + 60), per_device=20)
    await store.put_reminder(Reminder.once(OTHER, "another device's", now + 60), per_device=20)
    await store.forget_device(DEVICE)
    assert await store.reminders(DEVICE) == [] and await store.take_fired(DEVICE) == []
    assert [r.text for r in await store.reminders()] == ["another device's"]
