"""BatchWorker: one thread that runs small jobs for every session of an event loop, in batches.

Per-frame audio work (VAD inference, Opus decode/encode) is tiny per call but constant per
session; on the event loop it queues every other session behind it, and one call per job pays
the fixed cost of a native call (and of a thread hop) each time. A BatchWorker takes jobs from
any number of sessions, runs everything that arrived while it was busy as *one* batch on its
own thread (native libraries release the GIL there, so the loop keeps routing frames on the
other core), and hands the results back to the loop with one wake-up per batch.

    worker = BatchWorker(run_batch, name="vad")
    result = await worker.submit(job)      # from the event loop; per caller, jobs run in order

`run_batch(jobs)` gets the jobs in submission order and returns one result per job; a result
that is an exception instance fails that job's future only.

Batching pays where one call over many rows is cheaper per row (Silero VAD: ~150 µs per window
alone, ~65 µs in a batch of 32). Under load jobs arrive spread out (each session's frame comes
every 60 ms, sessions out of phase), so a worker that starts as soon as one job is queued runs
batches of two or three. `linger` lets it wait a little for more: after the first job it sleeps as
long as the measured arrival rate needs to bring `target` jobs (at most `linger` seconds), then
takes everything queued — but only when that rate promises at least two more jobs in the time,
so a lone session is never delayed; an `urgent` job (one whose result someone is waiting for:
the VAD's end-of-speech decision) cuts the wait short. Jobs of one caller keep their order
as long as the caller awaits each before submitting the next (the way a station processes
chunks), and the batch function processes jobs in order. `nice` runs the thread that many levels
below its process (Linux), so a busy CPU serves the event loop's next step first.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, Generic, TypeVar

from loguru import logger

from vixio.core.thread_names import lower_this_thread, name_this_thread

J = TypeVar("J")
R = TypeVar("R")

RunBatch = Callable[[Sequence[J]], Sequence[R | BaseException]]


_WORKERS: weakref.WeakSet[BatchWorker[Any, Any]] = weakref.WeakSet()


def worker_stats() -> dict[str, dict[str, float]]:
    """Per BatchWorker of this process (by name): batches, jobs, mean batch size, lingered batches."""
    stats: dict[str, dict[str, float]] = {}
    for worker in list(_WORKERS):
        entry = stats.setdefault(worker.name, {"batches": 0, "jobs": 0, "lingered": 0})
        entry["batches"] += worker.batches
        entry["jobs"] += worker.jobs_done
        entry["lingered"] += worker.lingered
    for entry in stats.values():
        entry["mean_batch"] = round(entry["jobs"] / entry["batches"], 2) if entry["batches"] else 0.0
    return stats


class BatchWorker(Generic[J, R]):
    """A daemon thread running `run_batch` over whatever jobs are queued; see the module doc."""

    def __init__(
        self,
        run_batch: RunBatch[J, R],
        *,
        name: str,
        max_batch: int = 512,
        linger: float = 0.0,
        target: int = 1,
        nice: int = 0,
    ) -> None:
        if linger < 0 or target < 1 or max_batch < 1:
            raise ValueError(f"BatchWorker {name}: linger must be >= 0, target and max_batch >= 1")
        self._run_batch = run_batch
        self.name = name
        self.max_batch = max_batch
        self.linger = linger
        """Longest wait (seconds) for more jobs once one is queued; see the module doc."""
        self.target = min(target, max_batch)
        """Batch size at which the worker stops lingering."""
        self.nice = nice
        """Nice levels the thread runs below its process (Linux): see `lower_this_thread`."""
        self._rate = 0.0
        self._rate_since = time.monotonic()
        self._rate_jobs = 0
        # A C-implemented queue: put() is a few hundred ns with the GIL, get() waits without it.
        self._jobs: queue.SimpleQueue[tuple[J, asyncio.Future[R], asyncio.AbstractEventLoop] | None] = (
            queue.SimpleQueue()
        )
        self._hurry = threading.Event()
        """Set with an urgent job: a lingering batch runs at once."""
        self._start_lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.batches = 0
        """Batches run so far."""
        self.jobs_done = 0
        """Jobs run so far (jobs_done / batches is the mean batch size)."""
        self.lingered = 0
        """Batches that waited for more jobs."""
        _WORKERS.add(self)

    def submit(self, job: J, *, urgent: bool = False) -> asyncio.Future[R]:
        """Queue `job`; the future resolves on the calling loop. Call from an event loop thread.
        `urgent`: run the batch it joins without lingering for more jobs."""
        if self._closed:
            raise RuntimeError(f"BatchWorker {self.name} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._jobs.put((job, future, loop))
        if urgent:
            self._hurry.set()
        if self._thread is None:
            self._start()
        return future

    def close(self, timeout: float = 5.0) -> None:
        """Finish queued jobs and stop the thread; later submits raise."""
        with self._start_lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._jobs.put(None)
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=f"vixio-{self.name}", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        name_this_thread(f"vixio-{self.name}")
        lower_this_thread(self.nice)
        stopping = False
        while not stopping:
            first = self._jobs.get()
            if first is None:
                return
            batch = [first]
            stopping = self._collect(batch, self.max_batch)
            hurry = self._hurry.is_set()
            if not stopping and not hurry and len(batch) < self.target and (wait := self._linger_for(len(batch))) > 0:
                # One wait, then take what came: waiting on the queue would wake this thread
                # (and make it take the GIL) once per arriving job; only an urgent job wakes it.
                self.lingered += 1
                self._hurry.wait(wait)
                hurry = True
            if hurry:
                # Cleared before taking what came: an urgent job queued after this is either
                # taken now or leaves the flag set for the next batch.
                self._hurry.clear()
                stopping = self._collect(batch, self.max_batch) or stopping
            self._note_rate(len(batch))
            self._run_one(batch)

    def _collect(self, batch: list[Any], up_to: int) -> bool:
        """Add the queued jobs to `batch` (up to `up_to` in all); True at the stop marker."""
        while len(batch) < up_to:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True  # finish what came before the stop marker
            batch.append(item)
        return False

    def _linger_for(self, have: int) -> float:
        """Seconds worth waiting for `target` jobs at the current arrival rate (0: not worth it)."""
        if not self.linger or self._rate * self.linger < 2:
            return 0.0
        return min(self.linger, (self.target - have) / self._rate)

    def _note_rate(self, jobs: int) -> None:
        """Jobs per second, measured over windows of at least half a second."""
        self._rate_jobs += jobs
        now = time.monotonic()
        if now - self._rate_since >= 0.5:
            self._rate = self._rate_jobs / (now - self._rate_since)
            self._rate_since, self._rate_jobs = now, 0

    def _run_one(self, batch: list[tuple[J, asyncio.Future[R], asyncio.AbstractEventLoop]]) -> None:
        jobs = [job for job, _, _ in batch]
        try:
            results: Sequence[Any] = self._run_batch(jobs)
            if len(results) != len(jobs):
                raise RuntimeError(f"{self.name}: run_batch returned {len(results)} results for {len(jobs)} jobs")
        except BaseException as exc:  # noqa: BLE001 - a failing batch fails its jobs, not the thread
            logger.opt(exception=exc).error("{} batch of {} job(s) failed", self.name, len(jobs))
            results = [exc] * len(jobs)
        self.batches += 1
        self.jobs_done += len(jobs)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[R], Any]]] = {}
        for (_, future, loop), result in zip(batch, results):
            by_loop.setdefault(loop, []).append((future, result))
        for loop, settled in by_loop.items():
            with suppress(RuntimeError):  # that loop is closed: nobody is waiting any more
                loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    """On the loop: resolve one batch's futures (skipping callers that gave up)."""
    for future, result in settled:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
