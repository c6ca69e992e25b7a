"""BatchWorker: jobs from the loop run in batches on one thread, in order, failures per job."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from vixio.core.batching import BatchWorker

pytestmark = pytest.mark.unit


async def test_jobs_run_off_the_loop_in_order_and_in_batches() -> None:
    seen: list[tuple[str, list[int]]] = []

    def run(jobs):
        seen.append((threading.current_thread().name, list(jobs)))
        return [job * 2 for job in jobs]

    worker = BatchWorker(run, name="test-double")
    try:
        results = await asyncio.gather(*(worker.submit(i) for i in range(50)))
        assert results == [i * 2 for i in range(50)]
        assert all(name == "vixio-test-double" for name, _ in seen)
        assert [job for _, jobs in seen for job in jobs] == list(range(50))  # submission order
        assert len(seen) < 50  # jobs queued together ran together
        assert worker.jobs_done == 50 and worker.batches == len(seen)
    finally:
        worker.close()


async def test_a_failing_job_fails_only_its_caller_and_a_failing_batch_fails_its_jobs() -> None:
    def run(jobs):
        if "boom" in jobs:
            raise RuntimeError("the whole batch")
        return [ValueError(job) if job == "bad" else job.upper() for job in jobs]

    worker = BatchWorker(run, name="test-errors")
    try:
        results = await asyncio.gather(
            worker.submit("a"), worker.submit("bad"), worker.submit("b"), return_exceptions=True
        )
        assert results[0] == "A" and results[2] == "B" and isinstance(results[1], ValueError)
        with pytest.raises(RuntimeError, match="the whole batch"):
            await worker.submit("boom")
        assert await worker.submit("c") == "C"  # the thread survived
    finally:
        worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit("late")


async def test_a_caller_that_gives_up_does_not_break_the_others() -> None:
    gate = threading.Event()

    def run(jobs):
        gate.wait(5)
        return list(jobs)

    worker = BatchWorker(run, name="test-cancel")
    try:
        first = worker.submit(1)
        second = worker.submit(2)
        first.cancel()
        gate.set()
        assert await second == 2
    finally:
        worker.close()


async def test_linger_never_delays_a_lone_caller() -> None:
    worker = BatchWorker(lambda jobs: list(jobs), name="test-lone", linger=0.02, target=8)
    try:
        for n in range(20):  # one session's frames, one every 60 ms
            assert await worker.submit(n) == n
            await asyncio.sleep(0.06)
        assert worker.lingered == 0
    finally:
        worker.close()


async def test_linger_gathers_jobs_that_arrive_spread_out() -> None:
    sizes: list[int] = []

    def run(jobs):
        sizes.append(len(jobs))
        return list(jobs)

    worker = BatchWorker(run, name="test-linger", linger=0.02, target=8)
    try:
        # 40 callers out of phase, a job each every 60 ms (~670 jobs/s), as sessions' frames come.
        async def caller(offset: float) -> None:
            await asyncio.sleep(offset)
            for n in range(30):
                await worker.submit(n)
                await asyncio.sleep(0.06)

        await asyncio.gather(*(caller(i * 0.0015) for i in range(40)))
        late = sizes[len(sizes) // 2 :]  # the rate is measured over half-second windows
        assert sum(late) / len(late) >= 4  # without lingering: about one job per batch
        assert worker.lingered > 0
    finally:
        worker.close()


async def test_an_urgent_job_cuts_the_linger_short() -> None:
    # A long linger (1 s) that the arrival rate makes worth waiting for; an urgent job in the
    # lingering batch runs it at once, and the jobs queued with it go along.
    worker = BatchWorker(lambda jobs: list(jobs), name="test-urgent", linger=1.0, target=10_000)
    loop = asyncio.get_running_loop()
    try:
        worker._rate = 1000.0  # as measured under load: a linger is worth it
        plain = worker.submit("plain")
        await asyncio.sleep(0.05)  # the worker took "plain" and lingers
        started = loop.time()
        urgent = worker.submit("urgent", urgent=True)
        assert await urgent == "urgent" and await plain == "plain"
        assert loop.time() - started < 0.5
        assert worker.lingered == 1 and worker.batches == 1  # one batch: the lingering one
    finally:
        worker.close()


def test_linger_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="linger"):
        BatchWorker(lambda jobs: jobs, name="bad", linger=-1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
async def test_a_nice_worker_runs_below_the_loop_and_the_loop_keeps_its_priority() -> None:
    def nice_of_this_thread(jobs):
        return [os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) for _ in jobs]

    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    lowered, plain = (
        BatchWorker(nice_of_this_thread, name="test-nice", nice=5),
        BatchWorker(nice_of_this_thread, name="test-plain"),
    )
    try:
        assert await lowered.submit(0) == min(19, loop_nice + 5)
        assert await plain.submit(0) == loop_nice
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop_nice  # only that thread
    finally:
        lowered.close()
        plain.close()
