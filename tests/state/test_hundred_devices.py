"""100 devices finishing turns at once on a real SQLite file, with another process writing to the
same file meanwhile (the other worker): every turn is stored, an interrupted reply replaces its
turn, and the store costs the event loop no stall above 20 ms (vixio/state/sqlite_thread.py:
the SQL and the file run on the store thread, queued writes share one transaction)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from vixio.config.memory import MemoryConfig
from vixio.memory.conversation import ConversationMemory
from vixio.state.sqlite import SqliteStore
from vixio.testing.loop_ticks import LoopStalls

pytestmark = pytest.mark.process

DEVICES = 100
ROUNDS = 5
ATTEMPTS = 3
REPLY = "It is sunny in Paris today, with a light breeze from the west and a high of twenty-two degrees. " * 3
OTHER_WORKER = """
import asyncio, sys, time
from vixio.state.sqlite import SqliteStore
from vixio.state.store import StoredTurn

async def main() -> None:
    store = SqliteStore(sys.argv[1])
    await store.open()
    print("ready", flush=True)
    for round_ in range(int(sys.argv[2])):
        await asyncio.gather(*(store.put_turn(f"02:00:00:01:00:{n:02x}", StoredTurn(
            "w1", round_, "question", "answer " * 60, at=time.time())) for n in range(100)))
    await store.close()

asyncio.run(main())
"""


def device(attempt: int, n: int) -> str:
    return f"02:00:00:00:{attempt:02x}:{n:02x}"


async def burst(store: SqliteStore, attempt: int) -> tuple[LoopStalls, float]:
    """100 sessions settle `ROUNDS` turns at once each; the loop's stalls and its CPU per turn."""
    memory = ConversationMemory(store, MemoryConfig())
    conversations = [await memory.resume(device(attempt, n)) for n in range(DEVICES)]
    cpu_before = time.thread_time()
    async with LoopStalls() as stalls:
        for round_ in range(ROUNDS):
            # Every session's agent settles a turn in the same moment (AgentStation.on_turn)...
            for n, conversation in enumerate(conversations):
                conversation.record(round_, f"question {round_} from {n}", REPLY, False)
            await asyncio.sleep(0.005)
            # ...and the last reply of each was cut off: the same turn again, as heard.
            if round_ == ROUNDS - 1:
                for n, conversation in enumerate(conversations):
                    conversation.record(round_, f"question {round_} from {n}", "It is sunny", True)
            await asyncio.sleep(0.02)
        await asyncio.gather(*(conversation.close() for conversation in conversations))
    return stalls, (time.thread_time() - cpu_before) / (DEVICES * (ROUNDS + 1))


async def test_a_hundred_sessions_record_turns_at_once_losing_nothing_without_stalling(
    tmp_path: Path, server_gc: None
) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    await store.open()
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OTHER_WORKER, str(path), str(ROUNDS * 4 * ATTEMPTS), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert other.stdout is not None and (await other.stdout.readline()).strip() == b"ready"
        measured = [await burst(store, attempt) for attempt in range(ATTEMPTS)]
        assert await other.wait() == 0
    finally:
        if other.returncode is None:
            other.kill()
            await other.wait()
    busiest = store.busiest_batch_cpu
    try:
        for attempt in range(ATTEMPTS):
            for n in range(DEVICES):
                turns = await store.recent_turns(device(attempt, n), limit=100)
                assert [(t.seq, t.user) for t in turns] == [(r, f"question {r} from {n}") for r in range(ROUNDS)]
                assert turns[-1].interrupted and turns[-1].assistant == "It is sunny"
                assert all(t.assistant == REPLY.strip() for t in turns[:-1])
        assert len(await store.recent_turns("02:00:00:01:00:07", limit=1000)) == ROUNDS * 4 * ATTEMPTS
    finally:
        await store.close()
    report = (
        "; ".join(
            f"worst gap {s.worst_wall * 1000:.1f} ms wall, {s.worst_own * 1000:.1f} ms not waiting for a core, "
            f"{s.worst_cpu * 1000:.1f} ms loop CPU ({s.ticks} ticks), loop CPU {cpu * 1e6:.0f} us per turn"
            for s, cpu in measured
        )
        + f"; store thread's busiest batch {busiest * 1000:.1f} ms CPU; load {os.getloadavg()[0]:.1f}"
    )
    print(report)
    assert all(s.ticks > 5 for s, _ in measured), report  # the meter ran through the bursts
    # What the store costs the loop: its own work between two ticks, and the GIL the store thread
    # could hold meanwhile (its CPU per batch; the SQL and the file run without the GIL).
    assert max(s.worst_cpu for s, _ in measured) < 0.020 and busiest < 0.020, report
    # A gap less the time the loop waited for a core: what a device would notice on a machine
    # with cores to spare. The best of the attempts: on a machine busier than its cores, a store
    # thread preempted while it holds the GIL stalls the loop now and then for the scheduler's
    # sake; SQL run on the loop itself stalls it every time (28-67 ms measured here).
    assert min(s.worst_own for s, _ in measured) < 0.020, report
