"""What only the Redis backend does, against a real redis-server: its key layout and bounds, and
what an unreachable, restarted, hung or password-protected server does to vixio."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from loguru import logger

from vixio.state.redis import LAYOUT_VERSION, RedisStore, redacted
from vixio.state.store import LiveSession, StoredTurn, StoreError, StoreWriteError
from vixio.testing import redis_server
from vixio.testing.redis_server import FLEET_SECRET, RedisServer, free_port

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(redis_server.missing() is not None, reason=redis_server.missing() or ""),
]

DEVICE = "aa:bb:cc:dd:ee:ff"


def capture() -> tuple[list[str], int]:
    lines: list[str] = []
    sink = logger.add(
        lambda m: lines.append(f"{m.record['level'].name} {m.record['message']}"), level="INFO", filter="vixio.state"
    )
    return lines, sink


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A redis-server of this test's own (it stops and restarts it)."""
    started = RedisServer.start(tmp_path / "redis")
    yield started
    started.close()


async def raw(server: RedisServer, *command: str) -> object:
    """One command on a connection of the test's own (what an operator's redis-cli would see)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        return await client.execute_command(*command)
    finally:
        await client.aclose()


async def test_every_key_is_under_the_prefix_and_laid_out_as_documented(redis: RedisServer) -> None:
    first, second = RedisStore(redis.url, prefix="fleet-a:"), RedisStore(redis.url, prefix="fleet-b:")
    await first.open()
    await second.open()
    try:
        await first.admit(DEVICE, via="activation")
        await first.assign_profile(DEVICE, "kids")
        await first.set_memory(DEVICE, "likes trains")
        await first.approve_pairing(DEVICE, "robot")
        await first.put_turn(DEVICE, StoredTurn("c", 0, "hi", "hello", at=time.time()))
        await first.session_started(LiveSession("s1", DEVICE, "host/w0", time.time()))
        await first.hold_result(DEVICE, "a result", time.time() + 60, keep=4)
        types = {key: await raw(redis, "TYPE", key) for key in await raw(redis, "KEYS", "fleet-a:*")}
        assert types == {
            "fleet-a:schema": "string",
            "fleet-a:admissions": "hash",
            "fleet-a:profiles": "hash",
            "fleet-a:memories": "hash",
            "fleet-a:pairings": "hash",
            f"fleet-a:turns:{DEVICE}": "zset",
            f"fleet-a:turn-text:{DEVICE}": "hash",
            "fleet-a:sessions": "hash",
            f"fleet-a:device-sessions:{DEVICE}": "set",
            "fleet-a:workers": "hash",
            "fleet-a:devices": "zset",
            f"fleet-a:held:{DEVICE}": "list",
        }
        assert await raw(redis, "GET", "fleet-a:schema") == str(LAYOUT_VERSION)
        # Another fleet on the same server sees none of it.
        assert await second.admission(DEVICE) is None and await second.recent_turns(DEVICE, 5) == []
        assert await second.live_sessions() == [] and await second.pairings() == []
        assert await second.prune_history(time.time() + 10) == 0 and len(await first.recent_turns(DEVICE, 5)) == 1
    finally:
        await first.close()
        await second.close()


async def test_history_is_bounded_per_device_and_expires_after_history_days(redis: RedisServer) -> None:
    store = RedisStore(redis.url, prefix="bounds:", max_turns=10, history_seconds=2 * 86400)
    await store.open()
    try:
        start = time.time()
        for seq in range(25):
            await store.put_turn(DEVICE, StoredTurn("c", seq, f"q{seq}", "a", at=start + seq))
        assert [t.seq for t in await store.recent_turns(DEVICE, 100)] == list(range(15, 25))
        assert await raw(redis, "HLEN", f"bounds:turn-text:{DEVICE}") == 10
        ttl = int(await raw(redis, "TTL", f"bounds:turns:{DEVICE}"))  # two days after the newest turn
        assert 2 * 86400 <= ttl <= 2 * 86400 + 30
        assert int(await raw(redis, "TTL", f"bounds:turn-text:{DEVICE}")) == pytest.approx(ttl, abs=2)
        # A turn dated long ago does not shorten the history of the device.
        await store.put_turn(DEVICE, StoredTurn("old", 0, "old", "a", at=start - 5 * 86400))
        assert int(await raw(redis, "TTL", f"bounds:turns:{DEVICE}")) >= 2 * 86400 - 5
    finally:
        await store.close()


async def test_prune_walks_every_device_in_batches(redis: RedisServer) -> None:
    store = RedisStore(redis.url, prefix="prune*[x]:")  # a prefix with glob characters matches only itself
    other = RedisStore(redis.url, prefix="prune")
    await store.open()
    await other.open()
    try:
        now = time.time()
        devices = [f"02:00:00:00:{n // 256:02x}:{n % 256:02x}" for n in range(450)]
        await asyncio.gather(
            *(
                store.put_turn(d, StoredTurn("c", s, "x", "y", at=now - (40 - s) * 86400))
                for d in devices
                for s in (0, 39)
            )
        )
        await other.put_turn(DEVICE, StoredTurn("c", 0, "old", "y", at=now - 40 * 86400))
        trips = store.round_trips
        assert await store.prune_history(now - 30 * 86400) == 450
        assert store.round_trips - trips < 20  # SCAN batches, not a call per device
        assert [t.seq for t in await store.recent_turns(devices[-1], 5)] == [39]
        assert len(await other.recent_turns(DEVICE, 5)) == 1
    finally:
        await store.close()
        await other.close()


async def test_an_unreachable_server_at_startup_is_one_clear_error(tmp_path: Path) -> None:
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        await RedisStore(url, timeout=0.5).open()
    message = str(caught.value)
    assert message.startswith(f"state.url redis://:***@127.0.0.1:{url.split(':')[-1]}: cannot reach Redis (")
    assert message.endswith("start it, or point state.url to a running Redis or Valkey server")
    assert "s3cret" not in message and "\n" not in message and time.monotonic() - started < 5
    with pytest.raises(StoreError, match="not a Redis URL"):
        await RedisStore("http://127.0.0.1/0").open()


def test_vixio_serve_without_its_redis_says_so_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
xiaozhi: {{host: 127.0.0.1, port: 0, http: {{host: 127.0.0.1, port: 0}}}}
state: {{backend: redis, url: "redis://127.0.0.1:{free_port()}/0", timeout: 0.5, fleet_secret: {FLEET_SECRET}}}
""",
        encoding="utf-8",
    )
    for workers in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-m", "vixio", "serve", "--config", str(config), "--workers", workers],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1, result.stderr
        lines = [line for line in result.stderr.splitlines() if "cannot reach Redis" in line]
        assert len(lines) == 1 and "state.url redis://127.0.0.1:" in lines[0], result.stderr
        assert "Traceback" not in result.stderr and "starting 2 workers" not in result.stderr


async def test_the_password_comes_from_the_config_or_the_url_and_a_wrong_one_is_named(tmp_path: Path) -> None:
    server = RedisServer.start(tmp_path / "redis", requirepass="pa ss/word")
    try:
        with pytest.raises(StoreError, match=r"Redis refused the password .*set state.password"):
            await RedisStore(server.url).open()
        with pytest.raises(StoreError, match="Redis refused the password"):
            await RedisStore(server.url, password="wrong").open()
        for store in (
            RedisStore(server.url, password="pa ss/word"),
            RedisStore(server.url.replace("//", "//:pa%20ss%2Fword@")),
        ):
            await store.open()
            await store.admit(DEVICE, via="activation")
            assert await store.admission(DEVICE) is not None
            assert "pa" not in store.location.split("@")[0].split("//")[1].replace("***", "")
            await store.close()
    finally:
        server.close()
    assert redacted("rediss://user:pw@h:6380/2") == "rediss://user:***@h:6380/2"


async def test_keys_of_a_newer_vixio_are_refused(redis: RedisServer) -> None:
    await raw(redis, "SET", "newer:schema", str(LAYOUT_VERSION + 1))
    with pytest.raises(StoreError, match=r"written by a newer vixio \(layout 2.*set another state.prefix"):
        await RedisStore(redis.url, prefix="newer:").open()


async def test_an_outage_costs_one_error_fails_fast_and_recovers_by_itself(server: RedisServer) -> None:
    store = RedisStore(server.url, prefix="outage:", timeout=0.5)
    await store.open()
    lines, sink = capture()
    try:
        await store.put_turn(DEVICE, StoredTurn("c", 0, "before", "a", at=time.time()))
        server.stop()
        started = time.monotonic()
        outcomes = []
        for seq in range(1, 40):  # a conversation's writes and a session start's reads, meanwhile
            outcomes.append(
                await asyncio.gather(
                    store.put_turn(DEVICE, StoredTurn("c", seq, "lost", "a", at=time.time())),
                    store.recent_turns(DEVICE, 10),
                    store.memory(DEVICE),
                    return_exceptions=True,
                )
            )
        elapsed = time.monotonic() - started
        assert all(
            isinstance(w, StoreWriteError) and isinstance(r, StoreError) and isinstance(m, StoreError)
            for w, r, m in outcomes
        )
        assert elapsed < 3, f"{elapsed:.1f} s for 39 rounds: the calls waited instead of failing at once"
        errors = [line for line in lines if line.startswith("ERROR")]
        assert len(errors) == 1 and "cannot reach Redis" in errors[0] and "the conversations go on" in errors[0]
        assert store.round_trips < 15  # backoff: most calls did not touch the network

        server.restart()  # empty (no persistence), on the same port
        deadline = time.monotonic() + 15  # the backoff is at most 8 s
        while True:
            try:
                await store.put_turn(DEVICE, StoredTurn("c", 99, "after", "a", at=time.time()))
                break
            except StoreWriteError:
                assert time.monotonic() < deadline, "no recovery"
                await asyncio.sleep(0.1)
        assert [t.user for t in await store.recent_turns(DEVICE, 10)] == ["after"]
        assert sum("works again" in line for line in lines) == 1
        assert len([line for line in lines if line.startswith("ERROR")]) == 1
    finally:
        logger.remove(sink)
        await store.close()


async def test_a_restart_between_two_calls_costs_nothing(server: RedisServer) -> None:
    store = RedisStore(server.url, prefix="restart:")
    await store.open()
    lines, sink = capture()
    try:
        await store.put_turn(DEVICE, StoredTurn("c", 0, "before", "a", at=time.time()))
        server.restart()  # the pooled connections are dead now, the scripts forgotten
        await store.put_turn(DEVICE, StoredTurn("c", 1, "after", "a", at=time.time()))
        await store.set_memory(DEVICE, "still here")
        assert [t.user for t in await store.recent_turns(DEVICE, 5)] == ["after"]
        assert (await store.memory(DEVICE)) is not None
        assert not [line for line in lines if line.startswith("ERROR")]
    finally:
        logger.remove(sink)
        await store.close()


async def test_a_hung_server_fails_reads_within_the_timeout(server: RedisServer) -> None:
    store = RedisStore(server.url, prefix="hung:", timeout=0.3)
    await store.open()
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)  # accepts nothing, answers nothing
    try:
        started = time.monotonic()
        with pytest.raises(StoreError):
            await store.recent_turns(DEVICE, 10)
        with pytest.raises(StoreWriteError):
            await store.put_turn(DEVICE, StoredTurn("c", 0, "x", "y", at=time.time()))
        assert time.monotonic() - started < 2
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        await store.close()


async def test_a_full_redis_refuses_writes_with_one_error_and_reads_go_on(server: RedisServer) -> None:
    store = RedisStore(server.url, prefix="full:")
    await store.open()
    lines, sink = capture()
    try:
        await store.admit(DEVICE, via="activation")
        info = await store._link.client.info("memory")
        await raw(server, "CONFIG", "SET", "maxmemory", str(int(info["used_memory"]) + 64 * 1024))
        await raw(server, "CONFIG", "SET", "maxmemory-policy", "noeviction")
        refused = 0
        for seq in range(200):
            try:
                await store.put_turn(DEVICE, StoredTurn("c", seq, "x" * 2000, "y" * 2000, at=time.time() + seq))
            except StoreWriteError as exc:
                refused += 1
                assert "Redis is out of memory (maxmemory)" in str(exc)
            assert await store.admission(DEVICE) is not None  # reads work between the writes
        assert refused > 100
        assert await store.admission(DEVICE) is not None  # reads work
        errors = [line for line in lines if line.startswith("ERROR")]
        assert len(errors) == 1 and "the conversations go on" in errors[0]
        await raw(server, "CONFIG", "SET", "maxmemory", "0")
        await store.put_turn(DEVICE, StoredTurn("c", 999, "back", "again", at=time.time() + 999))
        assert sum(line.startswith("INFO") and "writes work again" in line for line in lines) == 1
    finally:
        logger.remove(sink)
        await store.close()


async def test_with_volatile_lru_old_histories_make_room_and_admissions_stay(server: RedisServer) -> None:
    store = RedisStore(server.url, prefix="lru:")
    await store.open()
    try:
        devices = [f"02:00:00:00:{n // 256:02x}:{n % 256:02x}" for n in range(300)]
        await asyncio.gather(*(store.admit(device, via="activation") for device in devices))
        info = await store._link.client.info("memory")
        await raw(server, "CONFIG", "SET", "maxmemory", str(int(info["used_memory"]) + 512 * 1024))
        await raw(server, "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
        for device in devices:  # ~1.2 MB of turns into 0.5 MB of room: no write is refused
            await asyncio.gather(
                *(
                    store.put_turn(device, StoredTurn("c", seq, "x" * 500, "y" * 500, at=time.time()))
                    for seq in range(4)
                )
            )
        assert int((await store._link.client.info("stats"))["evicted_keys"]) > 0
        assert len(await store.admissions()) == 300
        assert len(await store.recent_turns(devices[-1], 10)) == 4
    finally:
        await raw(server, "CONFIG", "SET", "maxmemory", "0")
        await store.close()


async def test_a_unix_socket_url(tmp_path: Path) -> None:
    socket_path = tmp_path / "redis.sock"
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(socket_path), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            assert time.monotonic() < deadline and process.poll() is None, "redis-server did not start"
            await asyncio.sleep(0.02)
        store = RedisStore(f"unix://{socket_path}?db=1")
        await store.open()
        await store.set_memory(DEVICE, "over a Unix socket")
        memory = await store.memory(DEVICE)
        assert memory is not None and memory.text == "over a Unix socket"
        await store.close()
    finally:
        process.terminate()
        process.wait(timeout=10)
