"""The supervisor's worker processes: start each, wait until it answers, restart it when it
exits, and end them all when the server stops.

A worker that exits unexpectedly is logged and restarted after a back-off (1 s, doubling up to
30 s; reset once it has run a minute). Each worker reads its config from a pipe that the
supervisor holds open for the worker's life: its end of file tells the worker the supervisor is
gone, so even a supervisor killed outright takes its workers with it. The supervisor
(supervisor.py) owns the ports and decides when to start and stop; this module is how.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from contextlib import suppress
from dataclasses import dataclass

import aiohttp
from loguru import logger

from vixio.config.models import VixioConfig
from vixio.fleet.directory import holder_name
from vixio.fleet.peers import Peers
from vixio.serve.dispatch import Dispatcher
from vixio.state import Store, StoreError
from vixio.transports.xiaozhi.http.ota import OtaServer

READY_TIMEOUT = 300.0
"""Seconds a starting worker has to load its models and bind; then it is killed (and retried)."""
BACKOFF_FIRST, BACKOFF_MAX, STABLE_AFTER = 1.0, 30.0, 60.0
"""Restart delay: first, largest, and the uptime after which a worker counts as healthy again."""


class WorkerStartError(RuntimeError):
    """A worker could not start at server start (its own log lines say why)."""


@dataclass(slots=True)
class WorkerProcess:
    """The supervisor's view of one worker."""

    index: int
    socket_path: str
    process: asyncio.subprocess.Process | None = None
    started: float = 0.0
    """time.monotonic() of the latest start."""
    ready: bool = False
    restarts: int = 0
    failures: int = 0
    """Unexpected exits in a row (drives the back-off)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


class WorkerLifecycle:
    """The supervisor's part that starts, watches, restarts and ends its workers."""

    config: VixioConfig
    workers: list[WorkerProcess]
    instance: str
    peers: Peers
    store: Store
    ota: OtaServer
    """Its port is passed to each worker (the vision URL given to devices)."""
    _dispatch: Dispatcher | None
    _config_line: bytes
    _stopping: asyncio.Event

    async def _spawn(self, worker: WorkerProcess) -> None:
        worker.ready = False
        assert self._dispatch is not None
        channel = self._dispatch.attach(worker.index)
        try:
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "vixio.serve.worker",
                "--index",
                str(worker.index),
                "--workers",
                str(len(self.workers)),
                "--socket",
                worker.socket_path,
                "--http-port",
                str(self.ota.port),
                "--dispatch-fd",
                str(channel.fileno()),
                stdin=asyncio.subprocess.PIPE,
                env=_worker_environment(),
                pass_fds=(channel.fileno(),),
            )
        finally:
            channel.close()  # the worker has its own copy
        worker.started = time.monotonic()
        assert worker.process.stdin is not None
        # The pipe stays open for the worker's life: its end of file tells the worker we are gone.
        worker.process.stdin.write(self._config_line)
        with suppress(ConnectionError):
            await worker.process.stdin.drain()

    async def _wait_ready(self, worker: WorkerProcess) -> bool:
        """Poll the worker's /healthz until it answers; False if it exits or takes too long."""
        process = worker.process
        assert process is not None
        deadline = time.monotonic() + READY_TIMEOUT
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=worker.socket_path), timeout=timeout
        ) as http:
            while process.returncode is None and not self._stopping.is_set():
                if time.monotonic() > deadline:
                    logger.error(
                        "worker w{} (pid {}) not ready after {:.0f} s; killing it",
                        worker.index,
                        process.pid,
                        READY_TIMEOUT,
                    )
                    with suppress(ProcessLookupError):
                        process.kill()
                    return False
                with suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get("http://worker/healthz") as response:
                        if response.status == 200:
                            worker.ready = True
                            self.peers.add(self.holder(worker.index), worker.socket_path)
                            if self._dispatch is not None:
                                self._dispatch.ready(worker.index)
                            return True
                with suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 0.2)
        return False

    async def _watch(self, worker: WorkerProcess) -> None:
        """Restart `worker` whenever it exits while the server is running."""
        while not self._stopping.is_set():
            assert worker.process is not None
            code = await worker.process.wait()
            worker.ready = False
            self.peers.discard(self.holder(worker.index))
            await self._forget_sessions(worker)
            if self._dispatch is not None:
                self._dispatch.detach(worker.index)
            if self._stopping.is_set():
                return
            uptime = time.monotonic() - worker.started
            worker.failures = 1 if uptime >= STABLE_AFTER else worker.failures + 1
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (worker.failures - 1))
            logger.error(
                "worker w{} (pid {}) exited with code {} after {:.0f} s; restarting in {:.0f} s",
                worker.index,
                worker.process.pid,
                code,
                uptime,
                delay,
            )
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return
            worker.restarts += 1
            try:
                await self._spawn(worker)
            except OSError as exc:  # e.g. out of memory or processes: try again after the next back-off
                worker.started = time.monotonic()
                logger.error("cannot start worker w{}: {}", worker.index, exc)
                continue
            if await self._wait_ready(worker):
                logger.info("worker w{} restarted (pid {})", worker.index, worker.pid)

    def holder(self, index: int) -> str:
        """Worker `index`'s name in the live-session directory and among peers."""
        return holder_name(self.instance, index)

    async def _forget_sessions(self, worker: WorkerProcess) -> None:
        """A worker died: its sessions are gone from the directory now, not at its restart."""
        try:
            await self.store.forget_sessions([self.holder(worker.index)])
        except StoreError as exc:
            logger.warning("the session directory keeps worker w{}'s sessions until it restarts: {}", worker.index, exc)

    async def _end_workers(self, *, drain: bool) -> list[asyncio.subprocess.Process]:
        """SIGTERM to every worker (with `drain`, SIGUSR1 to the ready ones: finish the replies
        first); kill what is left after the timeout. The processes that were running."""
        for worker in self.workers:
            if worker.running:
                assert worker.process is not None
                with suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGUSR1 if drain and worker.ready else signal.SIGTERM)
        running = [w.process for w in self.workers if w.process is not None]
        pending: set[asyncio.Future[int]] = set()
        limit = self.config.server.shutdown_timeout + (self.config.server.drain_timeout if drain else 0.0)
        if running:
            waits = [asyncio.ensure_future(process.wait()) for process in running]
            _, pending = await asyncio.wait(waits, timeout=limit)
        if pending:
            logger.warning("{} worker(s) still running after {:g} s; killing them", len(pending), limit)
            for process in running:
                if process.returncode is None:
                    with suppress(ProcessLookupError):
                        process.kill()
            await asyncio.wait(pending)
        for process in running:
            if process.stdin is not None:
                process.stdin.close()
        return running


WORKER_MALLOC_ENV = {"MALLOC_ARENA_MAX": "2"}
"""glibc's malloc in each worker: two arenas, not 8 per core (a worker's ~11 threads each took
one, and freed memory stays in the arena that held it). This environment's own values win."""


def _worker_environment() -> dict[str, str]:
    """This environment, with the vixio this supervisor runs first on the path: `-m` would
    otherwise prefer a `vixio/` folder in the current directory."""
    import vixio

    root = os.path.dirname(os.path.dirname(os.path.abspath(vixio.__file__)))
    path = os.environ.get("PYTHONPATH", "")
    return {**WORKER_MALLOC_ENV, **os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
