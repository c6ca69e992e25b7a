"""The fleet's bus (vixio/fleet/bus.py) in one process against a real redis-server: calls and
answers, members, a name used twice, Redis restarted under it, and what a client of Redis
without the fleet's secret can publish (nothing that is acted on); the signatures themselves
(bus_auth.py) on a virtual clock. Two whole instances talking
over it are in tests/fleet/test_fleet.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from loguru import logger

from vixio.fleet import bus_auth
from vixio.fleet.activation import FleetActivation
from vixio.fleet.bus import BusNameTaken, RedisBus, _glob_escape
from vixio.fleet.bus_auth import SEAL, WINDOW, BusSigner, Refused
from vixio.fleet.peers import PeerReply, Peers
from vixio.testing.redis_server import FLEET_SECRET, RedisServer
from vixio.testing.serve import until

pytestmark = pytest.mark.process


def echo(name: str, seen: list[Any]) -> Any:
    async def serve(method: str, path: str, body: Any) -> PeerReply:
        seen.append((method, path, body))
        if path == "/missing":
            return PeerReply(name, 404, {"error": "not here"})
        return PeerReply(name, 200, {"result": {"by": name, "args": body["args"]}})

    return serve


@pytest.fixture
async def fleet(redis: RedisServer) -> AsyncIterator[tuple[RedisBus, RedisBus, RedisBus, list[Any]]]:
    seen: list[Any] = []
    a = RedisBus(redis.url, "a/w0", prefix="t:", serve=echo("a/w0", seen), ttl=3, secret=FLEET_SECRET)
    b = RedisBus(redis.url, "b/w0", prefix="t:", serve=echo("b/w0", seen), ttl=3, secret=FLEET_SECRET)
    console = RedisBus(redis.url, "b/supervisor", prefix="t:", ttl=3, secret=FLEET_SECRET)
    for bus in (a, b, console):
        await bus.start()
    yield a, b, console, seen
    for bus in (a, b, console):
        await bus.close()


async def test_a_call_reaches_the_named_worker_and_its_answer_comes_back(fleet: Any) -> None:
    a, b, console, seen = fleet
    await until(
        lambda: _is(sorted(console.holders()) == ["a/w0", "b/w0"] and a.holders() == ["b/w0"]),
        5,
        "both workers to be members (each lists the others, the supervisor is none)",
    )
    reply = await console.request("a/w0", "POST", "/internal/x", json={"call": "c", "args": {"n": 1}}, timeout=2)
    assert (reply.worker, reply.status, reply.body) == ("a/w0", 200, {"result": {"by": "a/w0", "args": {"n": 1}}})
    assert seen == [("POST", "/internal/x", {"call": "c", "args": {"n": 1}})]
    missing = await b.request("a/w0", "POST", "/missing", json={}, timeout=2)
    assert missing.status == 404
    nobody = await b.request("c/w0", "POST", "/internal/x", json={}, timeout=2)
    assert nobody.status == 502 and "not on the fleet's bus" in nobody.body["error"]
    # Many calls at once, each answer to its own caller.
    replies = await asyncio.gather(*(b.request("a/w0", "POST", "/x", json={"args": i}, timeout=5) for i in range(50)))
    assert [r.body["result"]["args"] for r in replies] == list(range(50))


async def test_peers_reach_a_remote_worker_through_the_bus(fleet: Any) -> None:
    a, _, console, _ = fleet
    peers = Peers(remote=console)
    await until(lambda: _is(len(peers.workers) == 2), 5, "the members")
    assert peers.workers == ["a/w0", "b/w0"]
    replies = await peers.gather("POST", "/x", json={"args": "all"})
    assert [(r.worker, r.body["result"]["by"]) for r in replies] == [("a/w0", "a/w0"), ("b/w0", "b/w0")]
    assert (await peers.request("w3", "GET", "/x")).status == 502  # not local, not a fleet name
    await a.close()  # stopped: it leaves the members and its channel
    assert (await peers.request("a/w0", "POST", "/x", json={})).status == 502
    await peers.close()


async def test_a_name_already_on_the_bus_is_refused(fleet: Any, redis: RedisServer) -> None:
    twin = RedisBus(redis.url, "a/w0", prefix="t:", serve=echo("twin", []), secret=FLEET_SECRET)
    with pytest.raises(BusNameTaken, match="server.instance"):
        await twin.start()
    await twin.close()


async def test_a_supervisor_is_asked_from_the_moment_it_subscribes_before_any_worker_joins(
    fleet: Any, redis: RedisServer
) -> None:
    """An instance that has just started has its supervisor on the bus before its workers are
    members: a code it gave out must be found by the others then (FleetActivation.supervisors)."""
    a, _, console, _ = fleet
    lone = RedisBus(redis.url, "c/supervisor", prefix="t:", ttl=3, secret=FLEET_SECRET)
    other_fleet = RedisBus(redis.url, "d/supervisor", prefix="u:", ttl=3, secret=FLEET_SECRET)
    for bus in (lone, other_fleet):
        await bus.start()
    try:
        assert "c/w0" not in await a.refresh_members()  # c has no worker yet
        assert await a.subscribed("/supervisor") == ["b/supervisor", "c/supervisor"]  # not u:'s
        assert await a.subscribed("/w0") == ["a/w0", "b/w0"]
        asking = FleetActivation(cast(Any, SimpleNamespace()), console, "b")
        assert await asking.supervisors() == ["a/supervisor", "c/supervisor"]  # a: by its worker
    finally:
        for bus in (lone, other_fleet):
            await bus.close()
    assert _glob_escape("t[1]:*?\\") == "t\\[1\\]:\\*\\?\\\\"


async def test_the_bus_recovers_when_redis_restarts(fleet: Any, redis: RedisServer) -> None:
    a, b, _, _ = fleet
    redis.stop()
    failed = await b.request("a/w0", "POST", "/x", json={"args": 1}, timeout=2)
    assert failed.status == 502
    redis.restart()

    async def answered() -> bool:
        reply = await b.request("a/w0", "POST", "/x", json={"args": 2}, timeout=2)
        return reply.ok

    await until(answered, 20, "calls to work again after Redis came back")


async def _is(value: bool) -> bool:
    return value


# --- signatures (vixio/fleet/bus_auth.py) ------------------------------------------------------


class Clock:
    """A virtual clock: the window and the memory of ids are checked without sleeping."""

    def __init__(self) -> None:
        self.now = 1_764_380_000.0

    def __call__(self) -> float:
        return self.now


def test_a_sealed_message_opens_once_on_its_channel_within_the_window() -> None:
    clock = Clock()
    sender = BusSigner(FLEET_SECRET, channel="t:bus:a/w0", clock=clock)
    receiver = BusSigner(FLEET_SECRET, channel="t:bus:b/w0", clock=clock)
    sealed = sender.seal("t:bus:b/w0", {"id": "a/w0:1", "method": "POST"})
    assert sealed.startswith(SEAL) and receiver.open(sealed)["id"] == "a/w0:1"
    with pytest.raises(Refused) as again:
        receiver.open(sealed)
    assert again.value.reason == "replayed"
    captured = sender.seal("t:bus:b/w0", {"id": "a/w0:2"})
    clock.now += WINDOW + 0.5  # published again later: the id is forgotten by now, the time says it
    with pytest.raises(Refused) as later:
        receiver.open(captured)
    assert later.value.reason == "stale"
    assert receiver.open(sender.seal("t:bus:b/w0", {"id": "a/w0:3"}))["id"] == "a/w0:3"
    assert len(receiver._seen) == 1  # the ids of messages out of the window are forgotten
    ahead = BusSigner(FLEET_SECRET, channel="t:bus:c/w0", clock=lambda: clock.now + WINDOW + 1)
    with pytest.raises(Refused, match="timestamped"):
        receiver.open(ahead.seal("t:bus:b/w0", {}))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"id": "x", "reply_to": "t:bus:evil", "method": "POST", "path": "/internal/console"}', "unsigned"),
        (b"v1." + b"0" * 64 + b'.{"to": "t:bus:b/w0"}', "forged"),
        (b"v1.short.{}", "unsigned"),
        (b"", "unsigned"),
    ],
)
def test_an_unsigned_or_forged_message_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(Refused) as refused:
        BusSigner(FLEET_SECRET, channel="t:bus:b/w0").open(data)
    assert refused.value.reason == reason


def test_another_secret_another_channel_and_rotation() -> None:
    receiver = BusSigner(FLEET_SECRET, channel="t:bus:b/w0")
    other = BusSigner("another-fleets-secret-0123", channel="t:bus:a/w0")
    with pytest.raises(Refused, match="another secret"):
        receiver.open(other.seal("t:bus:b/w0", {}))
    with pytest.raises(Refused, match="another channel"):  # captured on a/w0's channel, published on b/w0's
        receiver.open(BusSigner(FLEET_SECRET, channel="t:bus:c/w0").seal("t:bus:a/w0", {}))
    rotating = BusSigner(FLEET_SECRET, also_accepted=["another-fleets-secret-0123"], channel="t:bus:b/w0")
    assert rotating.open(other.seal("t:bus:b/w0", {"n": 1}))["n"] == 1  # accepted while rotating
    assert receiver.open(rotating.seal("t:bus:b/w0", {"n": 2}))["n"] == 2  # but signed with the first
    with pytest.raises(ValueError, match="fleet_secret"):
        BusSigner("", channel="t:bus:b/w0")


def test_the_memory_of_ids_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bus_auth, "MAX_REMEMBERED", 3)
    clock = Clock()
    sender = BusSigner(FLEET_SECRET, channel="t:bus:a/w0", clock=clock)
    receiver = BusSigner(FLEET_SECRET, channel="t:bus:b/w0", clock=clock)
    for n in range(3):
        receiver.open(sender.seal("t:bus:b/w0", {"n": n}))
    with pytest.raises(Refused) as flooded:
        receiver.open(sender.seal("t:bus:b/w0", {"n": 3}))
    assert flooded.value.reason == "flooded"
    clock.now += WINDOW + 1
    assert receiver.open(sender.seal("t:bus:b/w0", {"n": 4}))["n"] == 4


async def test_a_forged_or_replayed_message_on_redis_reaches_no_route_and_is_logged_once(
    fleet: Any, redis: RedisServer
) -> None:
    import redis.asyncio as aioredis

    a, _, console, seen = fleet
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING", format="{message}")
    raw = aioredis.Redis.from_url(redis.url)
    captured = raw.pubsub()
    try:
        await captured.subscribe("t:bus:a/w0")  # an eavesdropper on a/w0's channel
        forged = json.dumps(
            {
                "id": "evil:1",
                "reply_to": "t:bus:evil",
                "method": "POST",
                "path": "/internal/x",
                "json": {"call": "c", "args": {"n": "forged"}},
            }
        )
        for _ in range(3):
            assert await raw.publish("t:bus:a/w0", forged) == 2  # a/w0 and the eavesdropper got it
        genuine = await console.request("a/w0", "POST", "/internal/x", json={"call": "c", "args": {"n": 1}}, timeout=2)
        assert genuine.ok
        messages = await published(captured)
        assert len(messages) == 4
        for _ in range(2):
            await raw.publish("t:bus:a/w0", messages[-1])  # the genuine call, published again
        await asyncio.sleep(0.5)
    finally:
        logger.remove(sink)
        await captured.aclose()
        await raw.aclose()
    assert seen == [("POST", "/internal/x", {"call": "c", "args": {"n": 1}})]
    dropped = [line for line in lines if "fleet bus: dropped" in line]
    assert len(dropped) == 2, dropped  # one line per kind: unsigned, replayed
    assert "not signed" in dropped[0] and "already received" in dropped[1]
    assert a.signer.refused == {"unsigned": 3, "replayed": 2}


async def published(subscriber: Any, quiet: float = 0.5) -> list[bytes]:
    """What `subscriber` received until nothing came for `quiet` seconds."""
    received = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + quiet
    while loop.time() < deadline:
        message = await subscriber.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if message is not None:
            received.append(message["data"])
            deadline = loop.time() + quiet
    return received
