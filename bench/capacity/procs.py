"""Child processes and /proc accounting for bench/bench_capacity.py.

`Children` starts every child in its own process group and kills the groups at the end, on
Ctrl-C and on SIGTERM, so no fake, server or worker outlives the benchmark. `ProcessTree`
reads CPU time (user + system) and resident memory of a process and all its descendants
(the server and its workers) straight from /proc.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class Children:
    """Every child process of the benchmark; `kill_all()` is idempotent and runs at exit."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[Any]] = []
        atexit.register(self.kill_all)
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def start(self, args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(args, start_new_session=True, **kwargs)
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
        """SIGTERM the child's process group, SIGKILL it after `grace` seconds."""
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(proc, signal.SIGKILL)  # workers left behind by a dead parent, if any
        if proc.poll() is None:
            proc.wait()
        if proc in self._procs:
            self._procs.remove(proc)

    def kill_all(self) -> None:
        for proc in list(self._procs):
            self.stop(proc, grace=5.0)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        raise KeyboardInterrupt


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Usage:
    """CPU seconds (user + system, all processes of the tree) and summed RSS at one moment."""

    time: float
    cpu_s: float
    rss_bytes: int
    processes: int
    runqueue_wait_s: float = 0.0
    """Time the tree's threads were runnable but waited for a CPU (other processes had it)."""


class ProcessTree:
    """A process and its descendants, read from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def pids(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            stat = _read_stat(int(entry.name))
            if stat is not None:
                children.setdefault(int(stat[1]), []).append(int(entry.name))
        found, todo = [], list(self._roots())
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def _roots(self) -> list[int]:
        return [self.pid]

    def pss_bytes(self) -> int:
        """Proportional set size summed over the tree: shared pages (the models every worker
        maps, the interpreter) counted once overall, unlike a sum of RSS. Walks page tables:
        read it at a few moments, not in a sampling loop."""
        total = 0
        for pid in self.pids():
            try:
                text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        return total

    def usage(self) -> Usage:
        cpu = rss = count = wait = 0
        for pid in self.pids():
            stat = _read_stat(pid)
            if stat is None:
                continue
            cpu += int(stat[11]) + int(stat[12])  # utime, stime
            rss += int(stat[21]) * PAGE
            count += 1
            wait += _runqueue_wait_ns(pid)
        return Usage(time.monotonic(), cpu / TICKS, rss, count, wait / 1e9)

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) by thread name, summed over the tree's processes: where a
        server's CPU goes (the event loops, the VAD's scoring thread, the store's thread, ...).
        Threads that ended are not counted."""
        by_name: dict[str, float] = {}
        pids = self.pids()
        for pid in pids:
            try:
                tasks = list(Path(f"/proc/{pid}/task").iterdir())
            except OSError:
                continue
            for task in tasks:
                try:
                    name = (task / "comm").read_text().strip()
                    text = (task / "stat").read_text()
                except OSError:
                    continue
                fields = text[text.rindex(")") + 2 :].split()
                if task.name == str(pid):  # a process's main thread: the supervisor's, or a worker's event loop
                    name = "supervisor" if pid in self._roots() and len(pids) > 1 else "event loop"
                by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
        return by_name


class ProcessTrees(ProcessTree):
    """Several processes and their descendants as one (the instances of a fleet, HAProxy)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(pids[0] if pids else 0)
        self.roots = list(pids)

    def _roots(self) -> list[int]:
        return self.roots


@dataclass(frozen=True)
class HostCpu:
    """The whole machine's CPU seconds since boot, summed over cores (/proc/stat's `cpu` line)."""

    busy_s: float
    """user + nice + system + irq + softirq."""
    steal_s: float
    """Time the hypervisor gave this VM's virtual cores to someone else while they had work."""
    total_s: float

    @staticmethod
    def now() -> HostCpu:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        except (OSError, ValueError):
            return HostCpu(0.0, 0.0, 0.0)
        user, nice, system, idle, iowait, irq, softirq, steal = fields + [0] * (8 - len(fields))
        return HostCpu((user + nice + system + irq + softirq) / TICKS, steal / TICKS, sum(fields) / TICKS)

    def since(self, before: HostCpu) -> dict[str, float]:
        """Percent of the machine's CPU time between `before` and this reading that was busy, and
        that was stolen by the hypervisor (a neighbour's load: it slows every process here)."""
        total = self.total_s - before.total_s
        if total <= 0:
            return {"busy_pct": 0.0, "steal_pct": 0.0}
        return {
            "busy_pct": round(100 * (self.busy_s - before.busy_s) / total, 1),
            "steal_pct": round(100 * (self.steal_s - before.steal_s) / total, 2),
        }


def _runqueue_wait_ns(pid: int) -> int:
    """Summed over the process's threads: field 2 of /proc/<pid>/task/<tid>/schedstat."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total


def _read_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 of proc(5) is index 0)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


class Sampler:
    """Samples a ProcessTree every `interval` seconds on a thread, for CPU over any window and peak RSS."""

    def __init__(self, tree: ProcessTree, interval: float = 0.5) -> None:
        self.tree = tree
        self.interval = interval
        self.samples: list[Usage] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-sampler")

    def __enter__(self) -> Sampler:
        self.samples.append(self.tree.usage())
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.tree.usage())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(self.tree.usage())

    def cpu_at(self, when: float) -> float:
        """CPU seconds at `when`, interpolated between the two samples around it."""
        return self._at(when, "cpu_s")

    def runqueue_wait_at(self, when: float) -> float:
        """Seconds of waiting for a CPU at `when`, interpolated like `cpu_at`."""
        return self._at(when, "runqueue_wait_s")

    def _at(self, when: float, name: str) -> float:
        samples = self.samples
        if when <= samples[0].time:
            return float(getattr(samples[0], name))
        for before, after in zip(samples, samples[1:]):
            if before.time <= when <= after.time:
                span = after.time - before.time
                share = 0.0 if span <= 0 else (when - before.time) / span
                a, b = getattr(before, name), getattr(after, name)
                return float(a + share * (b - a))
        return float(getattr(samples[-1], name))

    def peak_rss(self, start: float, end: float) -> int:
        inside = [s.rss_bytes for s in self.samples if start <= s.time <= end]
        return max(inside) if inside else max(s.rss_bytes for s in self.samples)
