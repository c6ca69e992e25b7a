"""The `Store` contract: what every backend does, written against the interface only."""

from __future__ import annotations

import asyncio
import time

import pytest

from vixio.state.store import LiveSession, Store, StoredTurn

from .conftest import StoreFactory

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"
OTHER = "02:00:00:00:00:01"


async def test_admissions_are_kept_once_and_can_be_revoked(store: Store) -> None:
    assert await store.admission(DEVICE) is None
    before = time.time()
    await store.admit(DEVICE, via="activation")
    await store.admit(DEVICE, via="allow-list")  # the first admission stands
    await store.admit(OTHER, via="allow-list")
    admitted = await store.admission(DEVICE)
    assert admitted is not None and admitted.via == "activation" and before <= admitted.at <= time.time()
    assert [(a.device_id, a.via) for a in await store.admissions()] == [(DEVICE, "activation"), (OTHER, "allow-list")]
    assert await store.revoke(DEVICE) is True
    assert await store.revoke(DEVICE) is False
    assert await store.admission(DEVICE) is None
    assert [a.device_id for a in await store.admissions()] == [OTHER]


async def test_profile_assignment_set_replaced_and_cleared(store: Store) -> None:
    assert await store.assigned_profile(DEVICE) is None
    await store.assign_profile(DEVICE, "kitchen")
    await store.assign_profile(DEVICE, "kids")
    assert await store.assigned_profile(DEVICE) == "kids"
    assert await store.assigned_profile(OTHER) is None
    await store.assign_profile(DEVICE, None)
    assert await store.assigned_profile(DEVICE) is None


async def test_turns_come_back_in_order_bounded_and_replaced_by_seq(store: Store) -> None:
    start = time.time() - 100
    for seq in range(5):
        await store.put_turn(DEVICE, StoredTurn("c1", seq, f"question {seq}", f"answer {seq}", at=start + seq))
    await store.put_turn(OTHER, StoredTurn("c9", 0, "not mine", "no", at=start + 50))
    # The reply of the last turn was cut off: the same seq again replaces it.
    await store.put_turn(DEVICE, StoredTurn("c1", 4, "question 4", "ans", interrupted=True, at=start + 4))
    turns = await store.recent_turns(DEVICE, limit=3)
    assert [(t.seq, t.user, t.assistant, t.interrupted) for t in turns] == [
        (2, "question 2", "answer 2", False),
        (3, "question 3", "answer 3", False),
        (4, "question 4", "ans", True),
    ]
    assert turns[-1].conversation == "c1" and turns[-1].at == pytest.approx(start + 4)
    assert len(await store.recent_turns(DEVICE, limit=100)) == 5


async def test_turns_of_several_conversations_interleave_by_time(store: Store) -> None:
    now = time.time()
    await store.put_turn(DEVICE, StoredTurn("old", 0, "a", "b", at=now - 3600))
    await store.put_turn(DEVICE, StoredTurn("old", 1, "c", "d", at=now - 3500))
    await store.put_turn(DEVICE, StoredTurn("new", 0, "e", "f", at=now - 10))
    assert [(t.conversation, t.seq) for t in await store.recent_turns(DEVICE, limit=10)] == [
        ("old", 0),
        ("old", 1),
        ("new", 0),
    ]


async def test_history_is_cleared_per_device_and_pruned_by_age(store: Store) -> None:
    now = time.time()
    await store.put_turn(DEVICE, StoredTurn("c", 0, "old", "x", at=now - 40 * 86400))
    await store.put_turn(DEVICE, StoredTurn("c", 1, "new", "y", at=now))
    await store.put_turn(OTHER, StoredTurn("d", 0, "old too", "z", at=now - 31 * 86400))
    assert await store.prune_history(before=now - 30 * 86400) == 2
    assert [t.user for t in await store.recent_turns(DEVICE, limit=10)] == ["new"]
    assert await store.recent_turns(OTHER, limit=10) == []
    assert await store.clear_history(DEVICE) == 1
    assert await store.recent_turns(DEVICE, limit=10) == []


async def test_one_turn_is_deleted_by_conversation_and_seq(store: Store) -> None:
    now = time.time()
    for seq in range(3):
        await store.put_turn(DEVICE, StoredTurn("c", seq, f"q{seq}", f"a{seq}", at=now + seq))
    await store.put_turn(OTHER, StoredTurn("c", 1, "other", "x", at=now))
    assert await store.delete_turn(DEVICE, "c", 1) is True
    assert await store.delete_turn(DEVICE, "c", 1) is False
    assert await store.delete_turn(DEVICE, "elsewhere", 0) is False
    assert [t.seq for t in await store.recent_turns(DEVICE, limit=10)] == [0, 2]
    assert [t.user for t in await store.recent_turns(OTHER, limit=10)] == ["other"]


async def test_devices_are_listed_newest_first_a_page_at_a_time(store: Store) -> None:
    now = time.time()
    assert await store.devices(limit=10) == []
    await store.put_turn(DEVICE, StoredTurn("c", 0, "q", "a", at=now - 100))
    await store.put_turn(DEVICE, StoredTurn("c", 1, "q", "a", at=now - 50))
    await store.set_memory(OTHER, "likes trains")  # memory only, updated now
    third = "02:00:00:00:00:03"
    await store.put_turn(third, StoredTurn("c", 0, "q", "a", at=now - 500))
    await store.set_memory(DEVICE, "Alice")
    listed = await store.devices(limit=10)
    assert [d.device_id for d in listed][2:] == [third]
    assert {d.device_id for d in listed[:2]} == {DEVICE, OTHER}
    record = next(d for d in listed if d.device_id == DEVICE)
    assert (record.turns, record.memory_chars) == (2, 5) and record.last_turn == pytest.approx(now - 50)
    other = next(d for d in listed if d.device_id == OTHER)
    assert (other.turns, other.last_turn, other.memory_chars) == (0, None, 12)
    assert [d.device_id for d in await store.devices(limit=2, offset=1)] == [d.device_id for d in listed[1:3]]
    assert await store.devices(limit=5, offset=3) == []
    await store.forget_device(third)
    assert [d.device_id for d in await store.devices(limit=10)] == [d.device_id for d in listed[:2]]


async def test_held_results_are_taken_once_in_order_bounded_and_expire(open_client: StoreFactory) -> None:
    first, second = await open_client(), await open_client()
    now = time.time()
    for n in range(5):
        await first.hold_result(DEVICE, f'{{"n": {n}}}', until=now + 600, keep=3)
    await first.hold_result(DEVICE, "gone", until=now - 1, keep=3)  # already past its time
    await first.hold_result(OTHER, "theirs", until=now + 600, keep=3)
    # Past `keep` the oldest went (n 0-2); the expired one is never handed out; one client gets them.
    taken = await asyncio.gather(first.take_results(DEVICE), second.take_results(DEVICE))
    assert sorted(taken, key=len) == [[], ['{"n": 3}', '{"n": 4}']]
    assert await second.take_results(DEVICE) == []
    await second.hold_result(DEVICE, "later", until=now + 600, keep=3)
    await second.hold_result("02:00:00:00:00:03", "expired", until=now - 1, keep=3)
    assert await second.prune_results(before=time.time()) in (0, 1)  # Redis lets it expire by itself
    assert await second.take_results("02:00:00:00:00:03") == []
    assert await first.take_results(DEVICE) == ["later"]
    await first.forget_device(OTHER)
    assert await first.take_results(OTHER) == []


async def test_memory_is_replaced_and_empty_text_clears_it(store: Store) -> None:
    assert await store.memory(DEVICE) is None
    await store.set_memory(DEVICE, "The user is Alice.")
    await store.set_memory(DEVICE, "The user is Alice; she likes green tea.")
    memory = await store.memory(DEVICE)
    assert memory is not None and memory.text == "The user is Alice; she likes green tea."
    await store.set_memory(DEVICE, "")
    assert await store.memory(DEVICE) is None


async def test_pairing_approvals(store: Store) -> None:
    await store.approve_pairing(DEVICE, "companion-1", "client-a")
    await store.approve_pairing(DEVICE, "companion-1", "client-b")  # the same companion on another board
    await store.approve_pairing(DEVICE, "companion-2")
    await store.approve_pairing(DEVICE, "companion-1", "client-a")
    await store.approve_pairing(OTHER, "companion-3")
    assert [(p.companion, p.client_id) for p in await store.pairings(DEVICE)] == [
        ("companion-1", "client-a"),
        ("companion-1", "client-b"),
        ("companion-2", ""),
    ]
    assert len(await store.pairings()) == 4
    assert await store.revoke_pairing(DEVICE, "companion-1", "client-a") is True
    assert await store.revoke_pairing(DEVICE, "companion-1", "client-a") is False
    assert [(p.device_id, p.companion, p.client_id) for p in await store.pairings(DEVICE)] == [
        (DEVICE, "companion-1", "client-b"),
        (DEVICE, "companion-2", ""),
    ]


async def test_events_are_counted_per_key_and_window_by_every_client(open_client: StoreFactory) -> None:
    a, b = await open_client(), await open_client()  # two processes (or instances) on one store
    assert [await a.count_event("register:robot", 0.5) for _ in range(2)] == [1, 2]
    assert await b.count_event("register:robot", 0.5) == 3
    assert await b.count_event("register:other", 0.5) == 1
    await asyncio.sleep(0.7)  # the window ended: a new one starts
    assert await a.count_event("register:robot", 0.5) == 1


async def test_live_session_directory(store: Store) -> None:
    now = time.time()
    await store.session_started(LiveSession("s1", DEVICE, "w0", now))
    await store.session_started(LiveSession("s2", OTHER, "w1", now + 1))
    await store.session_started(LiveSession("s3", DEVICE, "w1", now + 2))
    assert [s.worker for s in await store.live_sessions(DEVICE)] == ["w0", "w1"]
    await store.session_ended("s1")
    await store.session_ended("unknown")
    assert [s.session_id for s in await store.live_sessions()] == ["s2", "s3"]
    assert await store.forget_sessions(["w1"]) == 2
    await store.session_started(LiveSession("s4", DEVICE, "w0", now))
    assert await store.forget_sessions() == 1
    assert await store.live_sessions() == []


async def test_a_worker_whose_heartbeat_stops_drops_out_of_the_directory(store: Store) -> None:
    now = time.time()
    await store.session_started(LiveSession("s1", DEVICE, "host-a/w0", now))
    await store.session_started(LiveSession("s2", OTHER, "host-b/w0", now + 1))
    await store.heartbeat("host-b/w0", ttl=1.5)  # long enough for a loaded machine to list it first
    await store.session_started(LiveSession("s3", OTHER, "host-b/w0", now + 2))  # keeps the heartbeat's expiry
    assert [s.session_id for s in await store.live_sessions()] == ["s1", "s2", "s3"]
    await asyncio.sleep(2.0)  # host-b was killed: no heartbeat since
    assert [s.session_id for s in await store.live_sessions()] == ["s1"]
    assert await store.live_sessions(OTHER) == []
    await store.heartbeat("host-b/w0")  # it was only stalled: its sessions are back
    assert [s.session_id for s in await store.live_sessions(OTHER)] == ["s2", "s3"]
    # A restarted worker forgets its sessions, and its heartbeat with them.
    assert await store.forget_sessions(["host-b/w0"]) == 2
    await store.session_started(LiveSession("s4", OTHER, "host-b/w0", now + 3))
    assert [s.session_id for s in await store.live_sessions(OTHER)] == ["s4"]


async def test_a_heartbeat_lists_again_the_sessions_the_store_lost(store: Store) -> None:
    """A Redis restarted empty (or FLUSHALL) forgot the directory: each worker's next heartbeat,
    which carries its live sessions, writes back those that are missing, in one call."""
    now = time.time()
    ours = [LiveSession("s1", DEVICE, "host-a/w0", now), LiveSession("s2", OTHER, "host-a/w0", now + 1)]
    for session in ours:
        await store.session_started(session)
    assert await store.heartbeat("host-a/w0", ttl=30, sessions=ours) == []  # nothing lost
    await store.forget_sessions()  # the store lost everything
    assert await store.live_sessions() == []
    assert sorted(await store.heartbeat("host-a/w0", ttl=30, sessions=ours)) == ["s1", "s2"]
    assert await store.live_sessions() == ours  # as they were: same holders, same start times
    assert await store.live_sessions(OTHER) == [ours[1]]
    # Written again only where missing: an entry another worker wrote meanwhile is left as it is.
    await store.session_ended("s2")
    await store.session_started(LiveSession("s1", DEVICE, "host-b/w0", now + 5))
    assert await store.heartbeat("host-a/w0", ttl=30, sessions=ours) == ["s2"]
    assert [(s.session_id, s.worker) for s in await store.live_sessions()] == [("s2", "host-a/w0"), ("s1", "host-b/w0")]


async def test_a_session_id_started_again_moves_to_its_new_device(store: Store) -> None:
    now = time.time()
    await store.session_started(LiveSession("s1", DEVICE, "w0", now))
    await store.session_started(LiveSession("s1", OTHER, "w1", now + 1))
    assert await store.live_sessions(DEVICE) == []
    assert [(s.device_id, s.worker) for s in await store.live_sessions(OTHER)] == [(OTHER, "w1")]
    await store.session_ended("s1")
    assert await store.live_sessions() == [] and await store.live_sessions(OTHER) == []


async def test_forget_device_erases_history_memory_and_profile_but_not_admission(store: Store) -> None:
    await store.admit(DEVICE, via="activation")
    await store.assign_profile(DEVICE, "kids")
    await store.set_memory(DEVICE, "likes trains")
    await store.put_turn(DEVICE, StoredTurn("c", 0, "hi", "hello", at=time.time()))
    await store.put_turn(OTHER, StoredTurn("c", 0, "hi", "hello", at=time.time()))
    await store.pin_identity(DEVICE, "board-1")
    await store.pin_identity(OTHER, "board-2")
    await store.forget_device(DEVICE)
    assert await store.recent_turns(DEVICE, limit=5) == [] and await store.memory(DEVICE) is None
    assert await store.assigned_profile(DEVICE) is None and await store.admission(DEVICE) is not None
    assert await store.identity_pin(DEVICE) is None  # the next contact pins again
    assert len(await store.recent_turns(OTHER, limit=5)) == 1 and await store.identity_pin(OTHER) is not None


async def test_the_first_client_id_seen_pins_a_device_once_for_every_client(open_client: StoreFactory) -> None:
    first, second = await open_client(), await open_client()
    assert await first.identity_pin(DEVICE) is None
    before = time.time()
    # Two processes meet the same device id at once with different Client-Ids: one pin wins for both.
    pins = await asyncio.gather(
        *(client.pin_identity(DEVICE, f"board-{i}") for i in range(20) for client in (first, second))
    )
    winner = pins[0].client_id
    assert {pin.client_id for pin in pins} == {winner} and winner.startswith("board-")
    pin = await second.identity_pin(DEVICE)
    assert pin is not None and pin.client_id == winner and before <= pin.at <= pin.seen <= time.time()
    assert (await first.pin_identity(DEVICE, "someone-else")).client_id == winner
    again = await first.pin_identity(DEVICE, winner)  # seen within the hour: nothing to move on
    assert (again.client_id, again.at, again.seen) == (winner, pin.at, pin.seen)
    # A device that sends no Client-Id pins "" (and "" is a pin like any other).
    assert (await first.pin_identity(OTHER, "")).client_id == ""
    assert (await second.pin_identity(OTHER, "board-x")).client_id == ""


async def test_an_operators_rebind_replaces_the_pin_and_clears_its_requests(open_client: StoreFactory) -> None:
    store, other = await open_client(), await open_client()
    await store.pin_identity(DEVICE, "old-board")
    await store.pin_identity(OTHER, "board-o")
    await store.request_rebind(DEVICE, "new-board", per_device=4, total=100)
    await store.request_rebind(DEVICE, "new-board", per_device=4, total=100)
    await store.request_rebind(DEVICE, "claimant", per_device=4, total=100)
    await store.request_rebind(OTHER, "claimant", per_device=4, total=100)
    requests = await other.rebind_requests(DEVICE)
    assert [(r.client_id, r.attempts) for r in requests] == [("claimant", 1), ("new-board", 2)]
    assert requests[1].first <= requests[1].last <= requests[0].last
    assert len(await other.rebind_requests()) == 3
    assert await other.dismiss_rebind(DEVICE, "claimant") is True
    assert await other.dismiss_rebind(DEVICE, "claimant") is False
    await other.repin_identity(DEVICE, "new-board")
    pin = await store.identity_pin(DEVICE)
    assert pin is not None and pin.client_id == "new-board"
    assert (await store.pin_identity(DEVICE, "new-board")).client_id == "new-board"
    assert await store.rebind_requests(DEVICE) == []
    assert [(r.device_id, r.client_id) for r in await store.rebind_requests()] == [(OTHER, "claimant")]
    assert await store.unpin_identity(OTHER) is True and await store.unpin_identity(OTHER) is False
    assert await store.identity_pin(OTHER) is None and await store.rebind_requests() == []


async def test_pending_rebinds_are_bounded_per_device_and_in_total(store: Store) -> None:
    await store.pin_identity(DEVICE, "board")
    for i in range(10):  # one claimant cycling Client-Ids keeps only the newest few of that device
        await store.request_rebind(DEVICE, f"claimant-{i}", per_device=3, total=8)
    assert [r.client_id for r in await store.rebind_requests(DEVICE)] == ["claimant-9", "claimant-8", "claimant-7"]
    for i in range(10):  # many devices: the least recent requests go
        await store.request_rebind(f"02:00:00:00:01:{i:02d}", "c", per_device=3, total=8)
    every = await store.rebind_requests()
    assert len(every) == 8 and every[0].device_id == "02:00:00:00:01:09"
    assert {r.device_id for r in every} == {f"02:00:00:00:01:{i:02d}" for i in range(2, 10)}


async def test_another_client_sees_the_writes_and_data_outlives_a_reopen(open_client: StoreFactory) -> None:
    first, second = await open_client(), await open_client()
    await first.put_turn(DEVICE, StoredTurn("c", 0, "my name is Alice", "Hello Alice", at=time.time()))
    await first.admit(DEVICE, via="activation")
    assert [t.user for t in await second.recent_turns(DEVICE, limit=1)] == ["my name is Alice"]
    await first.close()
    await first.close()  # twice is fine
    third = await open_client()
    assert await third.admission(DEVICE) is not None


async def test_a_hundred_devices_finishing_turns_at_once_lose_nothing(open_client: StoreFactory) -> None:
    first, second = await open_client(), await open_client()
    devices = [f"02:00:00:00:{n // 256:02x}:{n % 256:02x}" for n in range(100)]
    now = time.time()
    writes = [
        client.put_turn(device, StoredTurn("c", seq, f"q{seq}", f"a{seq}", at=now + seq))
        for seq in range(3)
        for n, device in enumerate(devices)
        for client in [(first, second)[n % 2]]
    ]
    await asyncio.gather(*writes)
    for device in devices:
        assert [t.user for t in await first.recent_turns(device, limit=10)] == ["q0", "q1", "q2"]


async def test_unicode_and_long_text_round_trip(store: Store) -> None:
    text = "忘掉我说过的话 🍵 " * 500
    await store.put_turn(DEVICE, StoredTurn("对话", 0, text, "好的", at=time.time()))
    await store.set_memory(DEVICE, text)
    [turn] = await store.recent_turns(DEVICE, limit=1)
    assert turn.user == text and turn.conversation == "对话"
    memory = await store.memory(DEVICE)
    assert memory is not None and memory.text == text


async def test_a_hundred_turns_at_once_do_not_stall_the_event_loop(store: Store, server_gc: None) -> None:
    """The loop thread's own CPU time between two ticks: what the store costs the loop, apart from
    waiting for a core on a loaded machine (SQLite: the SQL runs on the store thread; Redis: the
    100 writes share one pipeline)."""
    worst = 0.0
    stop = asyncio.Event()

    async def tick() -> None:
        nonlocal worst
        while not stop.is_set():
            before = time.thread_time()
            await asyncio.sleep(0.001)
            worst = max(worst, time.thread_time() - before)

    ticker = asyncio.create_task(tick())
    try:
        for round_ in range(5):  # 100 devices finishing a turn at once, five times
            await asyncio.gather(
                *(
                    store.put_turn(
                        f"02:00:00:00:00:{n:02x}",
                        StoredTurn("c", round_, "what is the weather " * 5, "sunny and warm " * 20, at=time.time()),
                    )
                    for n in range(100)
                )
            )
    finally:
        stop.set()
        await ticker
    assert worst < 0.020, f"the loop spent {worst * 1000:.1f} ms between two ticks"


async def test_voiceprints_are_per_device_and_person_replaced_and_deleted(store: Store) -> None:
    import numpy as np

    alice = np.linspace(-1, 1, 256, dtype="<f4").tobytes()
    bob = np.linspace(1, -1, 256, dtype="<f4").tobytes()
    assert await store.voiceprints(DEVICE) == []
    await store.put_voiceprint(DEVICE, "Alice", bob, 1)
    await store.put_voiceprint(DEVICE, "Alice", alice, 3)  # a later enrolment replaces hers
    await store.put_voiceprint(DEVICE, "Bob", bob, 2)
    await store.put_voiceprint(OTHER, "Alice", bob, 1)  # another device's Alice is someone else
    prints = await store.voiceprints(DEVICE)
    assert [(p.person, p.samples, p.vector) for p in prints] == [("Alice", 3, alice), ("Bob", 2, bob)]
    assert prints[0].array()[0] == -1.0 and prints[0].at <= time.time()
    assert [(p.device_id, p.person) for p in await store.voiceprints()] == [
        (OTHER, "Alice"),
        (DEVICE, "Alice"),
        (DEVICE, "Bob"),
    ]
    assert await store.delete_voiceprint(DEVICE, "Bob") is True
    assert await store.delete_voiceprint(DEVICE, "Bob") is False
    assert [p.person for p in await store.voiceprints(DEVICE)] == ["Alice"]
    await store.forget_device(DEVICE)  # biometric data goes with the device's record
    assert await store.voiceprints(DEVICE) == []
    assert await store.clear_voiceprints(OTHER) == 1
    assert await store.voiceprints() == []
