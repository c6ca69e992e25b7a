"""State store benchmark (not a test): run `python bench/bench_state.py [--devices 10000]`.

The SQLite store on a real file, in one process (what one worker pays):

1. **Per turn**: `--burst` devices (100) finish a turn at once, `--rounds` times; each turn is one
   `Conversation.record` (what AgentStation.on_turn calls: a user text and a ~300-character reply).
   Measured: the event loop's own CPU per turn (`record` alone, and with the results handed back;
   the store thread does the SQL and the file), the
   wall time until the turn is stored (p50/p95), the store thread's CPU per turn, and the loop's
   worst CPU between two ticks of a 1 ms timer during the bursts.
2. **Session start** with `--devices` devices in the store (20 turns each, and admitted): the
   resume lookup (`ConversationMemory.resume`: the last 20 turns of the device) and the activation
   lookup (`Store.admission`), p50/p95 over 1,000 random devices. Target: lookup <= 2 ms p95.
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

from vixio.config.memory import MemoryConfig  # noqa: E402
from vixio.state.memory import ConversationMemory  # noqa: E402
from vixio.state.sqlite import SqliteStore  # noqa: E402
from vixio.state.store import StoredTurn  # noqa: E402

REPLY = ("It is sunny in Paris today, with a light breeze from the west and a high of twenty-two degrees. "
         "Take sunglasses if you go out this afternoon; the evening should stay clear and mild. ") * 2


def device_id(n: int) -> str:
    return f"02:00:{n >> 24 & 255:02x}:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}"


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3), "p95": round(ordered[int(len(ordered) * 0.95) - 1], 3),
            "max": round(ordered[-1], 3)}


async def per_turn(path: Path, burst: int, rounds: int) -> dict[str, object]:
    store = SqliteStore(path)
    await store.open()
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
    walls: list[float] = []
    queued_cpu = loop_cpu = process_cpu = 0.0
    for round_ in range(rounds):
        loop_before, process_before = time.thread_time(), time.process_time()
        started = time.perf_counter()
        for conversation in conversations:
            conversation.record(round_ + 1, f"what is the weather in Paris, question {round_}", REPLY, False)
        queued_cpu += time.thread_time() - loop_before  # what on_turn costs the turn itself
        done: list[float] = []

        async def stored(conversation: object) -> None:
            await conversation.close()  # type: ignore[attr-defined]
            done.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(stored(c) for c in conversations))
        loop_cpu += time.thread_time() - loop_before  # and the results handed back (thread CPU only)
        process_cpu += time.process_time() - process_before
        walls += done
        await asyncio.sleep(0.01)
    stop.set()
    await ticker
    await store.close()
    turns = burst * rounds
    return {"turns": turns, "burst": burst,
            "record_cpu_us_per_turn": round(queued_cpu / turns * 1e6, 1),
            "loop_cpu_us_per_turn": round(loop_cpu / turns * 1e6, 1),
            "process_cpu_us_per_turn": round(process_cpu / turns * 1e6, 1),
            "stored_after_ms": percentiles(walls),
            "loop_worst_tick_cpu_ms": round(worst_tick * 1000, 2)}


async def session_start(path: Path, devices: int, turns_each: int = 20) -> dict[str, object]:
    store = SqliteStore(path)
    await store.open()
    now = time.time()
    filled = time.perf_counter()
    for start in range(0, devices, 500):  # 500 devices' turns per gather: batches of the store thread
        await asyncio.gather(*(store.put_turn(device_id(n), StoredTurn("c", seq, f"question {seq}", REPLY[:200],
                                                                       at=now - 60 * (turns_each - seq)))
                               for n in range(start, min(devices, start + 500)) for seq in range(turns_each)))
        await asyncio.gather(*(store.admit(device_id(n), via="activation")
                               for n in range(start, min(devices, start + 500))))
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
    size_mb = path.stat().st_size / 2**20
    await store.close()
    return {"devices": devices, "turns_in_store": devices * turns_each, "fill_s": round(fill_s, 1),
            "file_mb": round(size_mb, 1), "resume_lookup_ms": percentiles(resume_ms),
            "turns_restored_per_lookup": restored / len(resume_ms), "admission_lookup_ms": percentiles(admission_ms)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=100, help="devices finishing a turn at once (default 100)")
    parser.add_argument("--rounds", type=int, default=20, help="bursts (default 20)")
    parser.add_argument("--devices", type=int, default=10_000, help="devices in the store for the lookups")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        turn = await per_turn(Path(folder) / "turns.db", args.burst, args.rounds)
        start = await session_start(Path(folder) / "devices.db", args.devices)
    print(f"per turn ({turn['turns']} turns, {turn['burst']} at once): record() {turn['record_cpu_us_per_turn']} us, "
          f"loop CPU {turn['loop_cpu_us_per_turn']} us, "
          f"process CPU {turn['process_cpu_us_per_turn']} us, stored after {turn['stored_after_ms']} ms, "
          f"worst loop CPU between ticks {turn['loop_worst_tick_cpu_ms']} ms")
    print(f"session start ({start['devices']} devices, {start['turns_in_store']} turns, {start['file_mb']} MB): "
          f"resume lookup {start['resume_lookup_ms']} ms ({start['turns_restored_per_lookup']:.0f} turns), "
          f"admission lookup {start['admission_lookup_ms']} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"per_turn": turn, "session_start": start}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main())
