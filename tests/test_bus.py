"""The fleet's bus (vixio/serve/bus.py) in one process against a real redis-server: calls and
answers, members, a name used twice, and Redis restarted under it. Two whole instances talking
over it are in tests/test_fleet.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from vixio.serve.bus import BusNameTaken, RedisBus
from vixio.serve.peers import PeerReply, Peers
from vixio.testing.redis_server import RedisServer
from vixio.testing.serve import until


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
    a = RedisBus(redis.url, "a/w0", prefix="t:", serve=echo("a/w0", seen), ttl=3)
    b = RedisBus(redis.url, "b/w0", prefix="t:", serve=echo("b/w0", seen), ttl=3)
    console = RedisBus(redis.url, "b/supervisor", prefix="t:", ttl=3)
    for bus in (a, b, console):
        await bus.start()
    yield a, b, console, seen
    for bus in (a, b, console):
        await bus.close()


async def test_a_call_reaches_the_named_worker_and_its_answer_comes_back(fleet: Any) -> None:
    a, b, console, seen = fleet
    await until(lambda: _is(sorted(console.holders()) == ["a/w0", "b/w0"] and a.holders() == ["b/w0"]), 5,
                "both workers to be members (each lists the others, the supervisor is none)")
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
    twin = RedisBus(redis.url, "a/w0", prefix="t:", serve=echo("twin", []))
    with pytest.raises(BusNameTaken, match="server.instance"):
        await twin.start()
    await twin.close()


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
