"""LoopTicks: how many event-loop iterations a piece of code let pass (tests of hop counts);
LoopStalls: the longest the loop went without running a 1 ms timer (tests of stalls).

    async with LoopTicks() as ticks:
        before = ticks.count
        await something()
        assert ticks.count == before  # it never suspended

    async with LoopStalls() as stalls:
        await asyncio.gather(*work)
    assert stalls.worst_cpu < 0.020  # the loop thread's own CPU between two ticks
"""

from __future__ import annotations

import asyncio
import time


class LoopTicks:
    """A task that counts one tick per loop iteration while the context is open."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTicks:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)  # the ticker is running before the caller measures
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop = True
        if self._task is not None:
            await self._task

    async def _tick(self) -> None:
        while not self._stop:
            self.count += 1
            await asyncio.sleep(0)


class LoopStalls:
    """A task that wakes every `period` seconds and keeps the longest gap between two wake-ups:
    `worst_wall` (what a device would notice, including waits for a core on a loaded machine),
    `worst_cpu` (the loop thread's own CPU time in a gap: the work that ran on the loop), and
    `worst_own` (a gap less the time the loop thread sat ready in the kernel's run queue: the
    loop's work plus whatever it waited for itself — a file, a lock, the GIL held by another
    thread — but not a busy machine's other processes; Linux schedstat, else the same as
    `worst_wall`)."""

    def __init__(self, period: float = 0.001) -> None:
        self.period = period
        self.worst_wall = 0.0
        self.worst_cpu = 0.0
        self.worst_own = 0.0
        self.ticks = 0
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopStalls:
        self._task = asyncio.create_task(self._watch())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop = True
        if self._task is not None:
            await self._task

    async def _watch(self) -> None:
        while not self._stop:
            wall, cpu, queued = time.perf_counter(), time.thread_time(), _run_queue_wait()
            await asyncio.sleep(self.period)
            self.ticks += 1
            gap = time.perf_counter() - wall - self.period
            self.worst_wall = max(self.worst_wall, gap)
            self.worst_cpu = max(self.worst_cpu, time.thread_time() - cpu)
            self.worst_own = max(self.worst_own, gap - (_run_queue_wait() - queued))


def _run_queue_wait() -> float:
    """Seconds the calling thread has waited, ready to run, for a core (0 where not measurable)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0
