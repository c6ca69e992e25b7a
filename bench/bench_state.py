"""State store benchmark (not a test): run `python bench/bench_state.py [--devices 10000] [--backend redis]`.

The SQLite store on a real file, or (`--backend redis`) the Redis store on a real redis-server
(`--redis-url`, else one started on a free loopback port in a temporary folder), in one process
(what one worker pays):

1. **Per turn**: `--burst` devices (100) finish a turn at once, `--rounds` times; each turn is one
   `Conversation.record` (what AgentStation.on_turn calls: a user text and a ~300-character reply).
   Measured: the event loop's own CPU per turn (`record` alone, and with the results handed back;
   the store thread does the SQL and the file), the
   wall time until the turn is stored (p50/p95), the store thread's CPU per turn, and the loop's
   worst CPU between two ticks of a 1 ms timer during the bursts.
2. **Session start** with `--devices` devices in the store (20 turns each, and admitted): the
   resume lookup (`ConversationMemory.resume`: the last 20 turns of the device) and the activation
   lookup (`Store.admission`), p50/p95 over 1,000 random devices. Target: lookup <= 2 ms p95.
The heap loaded before the measurements is frozen (`freeze_startup_heap`), as a server does
once its models are loaded.

3. **Redis round trips** (`--backend redis`, counted by the store): per turn, per session start
   (resume with the long-term memory, and the activation lookup), per session end (the verbatim
   long-term memory update), and the server's memory per device (`INFO memory`, 20 turns each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vixio.app.startup import freeze_startup_heap  # noqa: E402
from vixio.config.memory import MemoryConfig  # noqa: E402
from vixio.memory.conversation import ConversationMemory  # noqa: E402
from vixio.memory.long_term import VerbatimMemory  # noqa: E402
from vixio.state.sqlite import SqliteStore  # noqa: E402
from vixio.state.store import Store, StoredTurn  # noqa: E402

REPLY = (
    "It is sunny in Paris today, with a light breeze from the west and a high of twenty-two degrees. "
    "Take sunglasses if you go out this afternoon; the evening should stay clear and mild. "
) * 2


def device_id(n: int) -> str:
    return f"02:00:{n >> 24 & 255:02x}:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}"


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[int(len(ordered) * 0.95) - 1], 3),
        "max": round(ordered[-1], 3),
    }


async def per_turn(store: Store, burst: int, rounds: int) -> dict[str, object]:
    memory = ConversationMemory(store, MemoryConfig())
    conversations = [await memory.resume(device_id(n)) for n in range(burst)]
    worst_tick = 0.0
    stop = asyncio.Event()

    async def tick() -> None:
        nonlocal worst_tick
        while not stop.is_set():
            before = time.thread_time()
            await asyncio.sleep(0.001)
            worst_tick = max(worst_tick, time.thread_time() - before)

    ticker = asyncio.create_task(tick())
    trips_before = getattr(store, "round_trips", 0)
    walls: list[float] = []
    queued_cpu = loop_cpu = process_cpu = 0.0
    for round_ in range(rounds):
        loop_before, process_before = time.thread_time(), time.process_time()
        started = time.perf_counter()
        for conversation in conversations:
            conversation.record(round_ + 1, f"what is the weather in Paris, question {round_}", REPLY, False)
        queued_cpu += time.thread_time() - loop_before  # what on_turn costs the turn itself
        done: list[float] = []

        async def stored(conversation: object, done: list[float] = done, started: float = started) -> None:
            await conversation.close()  # type: ignore[attr-defined]
            done.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(stored(c) for c in conversations))
        loop_cpu += time.thread_time() - loop_before  # and the results handed back (thread CPU only)
        process_cpu += time.process_time() - process_before
        walls += done
        await asyncio.sleep(0.01)
    stop.set()
    await ticker
    trips = getattr(store, "round_trips", 0) - trips_before
    await store.close()
    turns = burst * rounds
    return {
        "turns": turns,
        "burst": burst,
        "round_trips_per_turn": round(trips / turns, 3),
        "record_cpu_us_per_turn": round(queued_cpu / turns * 1e6, 1),
        "loop_cpu_us_per_turn": round(loop_cpu / turns * 1e6, 1),
        "process_cpu_us_per_turn": round(process_cpu / turns * 1e6, 1),
        "stored_after_ms": percentiles(walls),
        "loop_worst_tick_cpu_ms": round(worst_tick * 1000, 2),
    }


async def session_start(store: Store, devices: int, turns_each: int = 20) -> dict[str, object]:
    now = time.time()
    filled = time.perf_counter()
    for start in range(0, devices, 500):  # 500 devices' turns per gather: batches of the store thread
        await asyncio.gather(
            *(
                store.put_turn(
                    device_id(n), StoredTurn("c", seq, f"question {seq}", REPLY[:200], at=now - 60 * (turns_each - seq))
                )
                for n in range(start, min(devices, start + 500))
                for seq in range(turns_each)
            )
        )
        await asyncio.gather(
            *(store.admit(device_id(n), via="activation") for n in range(start, min(devices, start + 500)))
        )
    fill_s = time.perf_counter() - filled
    memory = ConversationMemory(store, MemoryConfig(resume_minutes=60))
    resume_ms: list[float] = []
    admission_ms: list[float] = []
    restored = 0
    for n in random.sample(range(devices), min(1000, devices)):
        before = time.perf_counter()
        conversation = await memory.resume(device_id(n))
        resume_ms.append((time.perf_counter() - before) * 1000)
        restored += len(conversation.restored)
        before = time.perf_counter()
        await store.admission(device_id(n))
        admission_ms.append((time.perf_counter() - before) * 1000)
    size_mb = await store_mb(store)
    await store.close()
    return {
        "devices": devices,
        "turns_in_store": devices * turns_each,
        "fill_s": round(fill_s, 1),
        "store_mb": round(size_mb, 1),
        "resume_lookup_ms": percentiles(resume_ms),
        "turns_restored_per_lookup": restored / len(resume_ms),
        "admission_lookup_ms": percentiles(admission_ms),
    }


async def round_trips(store: Store, sessions: int = 100) -> dict[str, float]:
    """Redis round trips of a session's start (resume with long-term memory, activation lookup),
    of one turn, and of its end (the verbatim long-term memory update), as the server makes them."""
    memory = ConversationMemory(store, MemoryConfig(), VerbatimMemory(600))
    counts = {"session_start": 0, "turn": 0, "session_end": 0}
    for n in range(sessions):
        device = device_id(n)
        trips = store.round_trips  # type: ignore[attr-defined]
        conversation = await memory.resume(device)
        await store.admission(device)
        counts["session_start"] += store.round_trips - trips  # type: ignore[attr-defined]
        trips = store.round_trips  # type: ignore[attr-defined]
        conversation.record(1, "what is the weather in Paris", REPLY, False)
        await asyncio.gather(*conversation._writes)
        counts["turn"] += store.round_trips - trips  # type: ignore[attr-defined]
        trips = store.round_trips  # type: ignore[attr-defined]
        await conversation.close()
        await memory.close()
        counts["session_end"] += store.round_trips - trips  # type: ignore[attr-defined]
    await store.close()
    return {name: count / sessions for name, count in counts.items()}


async def store_mb(store: Store) -> float:
    """The SQLite file's size, or the memory Redis uses for this store's keys (the whole server's
    used memory: the benchmark's server holds nothing else)."""
    if isinstance(store, SqliteStore):
        return store.path.stat().st_size / 2**20
    info = await store._link.client.info("memory")  # type: ignore[attr-defined]
    return float(info["used_memory"]) / 2**20


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=100, help="devices finishing a turn at once (default 100)")
    parser.add_argument("--rounds", type=int, default=20, help="bursts (default 20)")
    parser.add_argument("--devices", type=int, default=10_000, help="devices in the store for the lookups")
    parser.add_argument("--backend", choices=("sqlite", "redis"), default="sqlite")
    parser.add_argument(
        "--redis-url",
        help="a Redis to use (its database is flushed); default: a redis-server started here on a free port",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    trips: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as folder:
        server = None
        if args.backend == "redis":
            from vixio.state.redis import RedisStore
            from vixio.testing.redis_server import RedisServer

            server = None if args.redis_url else RedisServer.start(Path(folder) / "redis")
            url = args.redis_url or server.url  # type: ignore[union-attr]

            async def open_store(name: str) -> Store:
                store = RedisStore(url, prefix=f"bench-{name}:")
                await store.open()
                await store._link.client.flushdb()  # the fill's memory is measured alone
                return store
        else:

            async def open_store(name: str) -> Store:
                store = SqliteStore(Path(folder) / f"{name}.db")
                await store.open()
                return store

        try:
            turns_store = await open_store("turns")
            # As a server does once its models are loaded: what is loaded so far leaves the garbage
            # collector's reach, so a full collection (redis-py allocates a lot) does not walk it.
            freeze_startup_heap()
            turn = await per_turn(turns_store, args.burst, args.rounds)
            start = await session_start(await open_store("devices"), args.devices)
            if args.backend == "redis":
                trips = await round_trips(await open_store("trips"))
        finally:
            if server is not None:
                server.close()
    print(
        f"{args.backend}: per turn ({turn['turns']} turns, {turn['burst']} at once): "
        f"record() {turn['record_cpu_us_per_turn']} us, loop CPU {turn['loop_cpu_us_per_turn']} us, "
        f"process CPU {turn['process_cpu_us_per_turn']} us, stored after {turn['stored_after_ms']} ms, "
        f"worst loop CPU between ticks {turn['loop_worst_tick_cpu_ms']} ms"
    )
    print(
        f"session start ({start['devices']} devices, {start['turns_in_store']} turns, {start['store_mb']} MB): "
        f"resume lookup {start['resume_lookup_ms']} ms ({start['turns_restored_per_lookup']:.0f} turns), "
        f"admission lookup {start['admission_lookup_ms']} ms"
    )
    if trips is not None:
        print(
            f"Redis round trips: {trips['session_start']:g} per session start (resume with the long-term memory, then the admission), "
            f"{trips['turn']:g} per turn alone and {turn['round_trips_per_turn']:g} per turn in bursts of "
            f"{turn['burst']} (one pipeline), {trips['session_end']:g} per session end (long-term memory update); "
            f"{start['store_mb'] * 2**20 / start['devices'] / 1024:.1f} KB of Redis memory per device "
            f"({start['turns_in_store'] // start['devices']} turns)"
        )
    if args.json:
        figures = {"backend": args.backend, "per_turn": turn, "session_start": start, "round_trips": trips}
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main())
