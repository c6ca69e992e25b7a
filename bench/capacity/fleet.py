"""Servers under load for bench/bench_fleet.py: a fleet behind HAProxy, and Redis's own counters.

`FleetProcess` is vixio/testing/fleet.py's `Fleet` (HAProxy with deploy/haproxy.cfg in front of N
`vixio serve` instances) run on an event loop of its own thread, configured like
bench/bench_capacity.py's server (capacity.server.server_config: the fakes, Silero VAD, Opus) and
read like it (`ServerUnderLoad`: one process tree over the instances and HAProxy, their logs).

`RedisCounters` reads `INFO` of the shared redis-server before and after something: commands,
read events (one per pipeline a client sends: vixio's store batches the calls of one moment
into one pipeline, so a read event is a round trip), commands by name and the server's CPU.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from capacity.procs import ProcessTree, ProcessTrees
from capacity.server import ServerUnderLoad, server_config

T = TypeVar("T")

FLEET_KEYS = ("host", "port", "http", "idle_timeout")
"""xiaozhi keys the fleet harness writes itself (loopback, free ports, no idle timeout)."""


class LoopThread:
    """An event loop on a daemon thread, so synchronous benchmark code can drive async harnesses."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="bench-fleet-loop")
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 600.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class FleetProcess(ServerUnderLoad):
    """`instances` × `vixio serve --workers workers` behind HAProxy (see the module docstring)."""

    def __init__(
        self,
        loop: LoopThread,
        tmp: Path,
        fakes_url: str,
        *,
        instances: int,
        workers: int,
        log_level: str = "INFO",
        memory: bool = True,
        overrides: dict[str, Any] | None = None,
        pin: bool = False,
    ) -> None:
        from vixio.testing.fleet import Fleet

        config = server_config(0, 0, fakes_url, log_level, tmp / "state.db", memory, overrides)
        xiaozhi = {k: v for k, v in config.pop("xiaozhi").items() if k not in FLEET_KEYS}
        self.loop = loop
        self.fleet = Fleet(
            tmp / f"fleet-{instances}x{workers}",
            None,
            instances=instances,
            workers=workers,
            xiaozhi=yaml.safe_dump(xiaozhi),
            extra=yaml.safe_dump(config),
            pin=pin,
        )
        self.workers = instances * workers
        self.ws_url = ""
        self.tree = ProcessTree(0)
        self.haproxy = ProcessTree(0)
        self.log_paths = []

    def __enter__(self) -> FleetProcess:
        try:
            self.loop.run(self.fleet.start())
        except BaseException:
            self.__exit__()
            raise
        self.ws_url = self.fleet.ws_url
        assert self.fleet.haproxy is not None and self.fleet.haproxy.process is not None
        haproxy = self.fleet.haproxy.process.pid
        self.tree = ProcessTrees([i.process.pid for i in self.fleet.instances] + [haproxy])
        self.haproxy = ProcessTree(haproxy)
        self.log_paths = [i.log for i in self.fleet.instances]
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.loop.run(self.fleet.stop())


@dataclass
class RedisSample:
    commands: int
    reads: int
    cpu_s: float
    by_command: dict[str, int] = field(default_factory=dict)


class RedisCounters:
    """INFO of one redis-server through one connection kept open (see the module docstring)."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.samples = 0

    def reset(self) -> None:
        """Empty the database (every configuration starts alike) and zero the statistics."""
        self.client.flushall()
        self.client.config_resetstat()

    def sample(self) -> RedisSample:
        info = self.client.info("all")
        self.samples += 1
        by_command = {
            k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in info.items()
            if k.startswith("cmdstat_") and k not in ("cmdstat_info", "cmdstat_config", "cmdstat_flushall")
        }
        return RedisSample(
            int(info["total_commands_processed"]),
            int(info["total_reads_processed"]),
            float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            by_command,
        )

    @staticmethod
    def delta(before: RedisSample, after: RedisSample) -> RedisSample:
        """`after - before`, less the INFO command (and its read) that took `after`."""
        by_command = {k: v - before.by_command.get(k, 0) for k, v in after.by_command.items()}
        return RedisSample(
            after.commands - before.commands - 1,
            after.reads - before.reads - 1,
            after.cpu_s - before.cpu_s,
            {k: v for k, v in by_command.items() if v},
        )

    def close(self) -> None:
        self.client.close()
