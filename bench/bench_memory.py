"""Memory of `vixio serve` with a config (the shipped offline default unless told): RSS and PSS of
the supervisor and of every worker, idle, after warm-up, and after many long answers.

Run: .venv/bin/python bench/bench_memory.py [--config config.yaml] [--workers 2] [--answers 200]
                                            [--warmup 10] [--play-out] [--json out.json]

The config file is used as is except its two ports (free loopback ports, so a running server
does not matter) and `idle_timeout` (off, so a device waiting on the other worker is not closed).
One simulated device per worker (vixio.testing.SimulatedDevice; the supervisor hands each new
device to the worker with the fewest) types prompts that make the model answer at length (the
reply runs to the `max_tokens` cap: ~100 words, ~30 s of speech), one answer after the other.

An answer counts as done once its worker has generated and synthesised it: after `tts start` the
worker's CPU time stays flat for a moment (only real-time pacing is left). The device then presses
its button (`abort`), as a user cutting a long answer short does, and types the next prompt: 200
answers take minutes instead of the ~2 hours their playback lasts. `--play-out` waits for each
reply's `tts stop` instead. The warm-up answers fill the agent's history (20 messages) first.

Per process, from /proc/PID/smaps_rollup: RSS, PSS (pages shared between processes, e.g.
memory-mapped model files and libraries, are split among them, so the PSS of all processes adds
up to what the server really takes) and the anonymous part of RSS (private heap, arenas, loaded
weights). Samples: idle (models loaded), after warm-up, every `--every` answers, and at the end,
each 3 s after the last answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from capacity.procs import TICKS, Children, _read_stat
from capacity.server import free_port

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300.0
PROMPTS = (
    "Tell me a long story about a dragon who learns to bake bread.",
    "Explain in detail how a car engine works, step by step.",
    "Describe your perfect summer holiday at length, with many details.",
    "Tell me everything you know about the history of the city of Rome.",
    "Write a long bedtime story about a little robot and the moon.",
    "Explain at length why the sky is blue and sunsets are red.",
    "Describe in detail how to plant and care for a vegetable garden.",
    "Tell me a long and funny story about a cat who wants to fly.",
)
QUIET_S = 0.6
"""After `tts start`, the worker's CPU must stay this long under QUIET_SHARE for the answer to count as done."""
SETTLE_S = 3.0
"""A sample is taken this long after the last answer: the worker is idle again (its post-synthesis trim ran)."""
QUIET_SHARE = 0.10
"""Share of one core below which a worker only paces audio (measured: ~1-3 % while playing out)."""


@dataclass
class ProcessMemory:
    """One process at one moment, in MB (from /proc/PID/smaps_rollup)."""

    role: str
    pid: int
    rss: float
    pss: float
    anon: float
    """Anonymous memory (heap, arenas, weights read into memory): private to this process."""


@dataclass
class Sample:
    """Every process of the server at one moment."""

    label: str
    answers: int
    processes: list[ProcessMemory] = field(default_factory=list)

    def total(self, key: str) -> float:
        return sum(getattr(process, key) for process in self.processes)


def smaps_rollup(pid: int) -> dict[str, float]:
    """Rss, Pss and Anonymous of `pid` in MB."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[name] = int(parts[0]) / 1024
    return values


def worker_pids(supervisor: int) -> dict[int, int]:
    """Worker index -> pid, from the command lines of the supervisor's children."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is None or int(stat[1]) != supervisor:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vixio.serve.worker" in argv and b"--index" in argv:
            found[int(argv[argv.index(b"--index") + 1])] = int(entry.name)
    return dict(sorted(found.items()))


def cpu_seconds(pid: int) -> float:
    stat = _read_stat(pid)
    return (int(stat[11]) + int(stat[12])) / TICKS if stat is not None else 0.0


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


class Server:
    """`python -m vixio serve --config <copy> --workers N` of this checkout, logging to a file."""

    def __init__(self, children: Children, config: Path, workers: int, tmp: Path) -> None:
        settings = yaml.safe_load(config.read_text())
        self.ws_port, self.http_port = free_port(), free_port()
        xiaozhi = settings.setdefault("xiaozhi", {})
        xiaozhi.update(host="127.0.0.1", port=self.ws_port, idle_timeout=0)
        xiaozhi.setdefault("http", {}).update(host="127.0.0.1", port=self.http_port)
        self.config_path = tmp / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(settings))
        self.log_path = tmp / "server.log"
        self.children, self.workers = children, workers
        self.proc: subprocess.Popen[Any] | None = None
        self.ws_url = f"ws://127.0.0.1:{self.ws_port}/xiaozhi/v1/"

    def start(self) -> None:
        self._log = self.log_path.open("wb")
        self.proc = self.children.start(
            [sys.executable, "-m", "vixio", "serve", "--config", str(self.config_path), "--workers", str(self.workers)],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    async def wait_ready(self) -> None:
        """Until /metrics.json shows every worker up."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"vixio serve exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    metrics = await self.metrics(http)
                    if sum(line.get("status") == "up" for line in metrics["workers"]) == self.workers:
                        return
                except (aiohttp.ClientError, OSError, KeyError, ValueError):
                    pass
                await asyncio.sleep(1.0)
        raise RuntimeError(f"the workers were not ready after {READY_TIMEOUT_S:g} s:\n{self.log_tail()}")

    async def metrics(self, http: aiohttp.ClientSession) -> dict[str, Any]:
        async with http.get(f"http://127.0.0.1:{self.http_port}/metrics.json") as response:
            return await response.json()

    def sample(self, label: str, answers: int) -> Sample:
        assert self.proc is not None
        sample = Sample(label, answers)
        pids = [("supervisor", self.proc.pid)] + [(f"w{i}", pid) for i, pid in worker_pids(self.proc.pid).items()]
        for role, pid in pids:
            memory = smaps_rollup(pid)
            sample.processes.append(
                ProcessMemory(
                    role, pid, round(memory["Rss"], 1), round(memory["Pss"], 1), round(memory.get("Anonymous", 0.0), 1)
                )
            )
        return sample

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(2)  # SIGINT, as Ctrl-C
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        self.children.stop(self.proc)
        self._log.close()
        return code

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class Talker:
    """One simulated device on one worker, answering prompt after prompt."""

    def __init__(self, ws_url: str, index: int, play_out: bool) -> None:
        from vixio.testing.device import SimulatedDevice

        self.device = SimulatedDevice(ws_url=ws_url, device_id=f"02:00:00:00:0a:{index:02x}", mcp=False)
        self.index, self.play_out = index, play_out
        self.worker_pid = 0
        self.answers = 0
        self.spoken_chars = 0
        self.seconds: list[float] = []

    async def answer(self) -> None:
        device = self.device
        prompt = PROMPTS[(self.index + self.answers) % len(PROMPTS)]
        mark = device.mark()
        started = time.monotonic()
        await device.send_text(prompt)
        await device.wait_for("tts", state="start", after=mark, timeout=120)
        if self.play_out:
            await device.wait_for("tts", state="stop", after=mark, timeout=300)
        else:
            await self._worker_done(mark, deadline=time.monotonic() + 120)
            stop_mark = device.mark()
            if device.recording.find("tts", "stop", mark) is None:
                await device.abort()
                await device.wait_for("tts", state="stop", after=stop_mark, timeout=30)
        self.seconds.append(time.monotonic() - started)
        self.spoken_chars += sum(
            len(m.data.get("text", ""))
            for m in device.received[mark:]
            if m.data.get("type") == "tts" and m.data.get("state") == "sentence_start"
        )
        self.answers += 1
        await device.wait_until_idle(timeout=30)

    async def _worker_done(self, mark: int, deadline: float) -> None:
        """Until the worker's CPU time stays flat for QUIET_S (generation and synthesis are over)."""
        step = 0.2
        last, quiet = cpu_seconds(self.worker_pid), 0.0
        while time.monotonic() < deadline:
            await asyncio.sleep(step)
            now = cpu_seconds(self.worker_pid)
            quiet = quiet + step if now - last < QUIET_SHARE * step + 1 / TICKS else 0.0
            last = now
            if quiet >= QUIET_S or self.device.recording.find("tts", "stop", mark) is not None:
                return


async def drive(server: Server, args: argparse.Namespace) -> list[Sample]:
    samples = [server.sample("idle", 0)]
    talkers = [Talker(server.ws_url, index, args.play_out) for index in range(args.workers)]
    for talker in talkers:
        await talker.device.connect()
    async with aiohttp.ClientSession() as http:
        for _ in range(50):  # a worker lists its session once the hello is answered
            metrics = await server.metrics(http)
            where = {session["device_id"]: session["worker"] for session in metrics["detail"]}
            if len(where) == len(talkers):
                break
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError(f"/metrics.json does not show the devices: {metrics}")
    pids = {line["worker"]: line["pid"] for line in metrics["workers"]}
    for talker in talkers:
        talker.worker_pid = pids[where[talker.device.device_id]]
    if len({talker.worker_pid for talker in talkers}) != len(talkers):
        print(f"note: the devices share a worker ({where}); the others stay idle", file=sys.stderr)

    async def rounds(count: int) -> None:
        for _ in range(count):
            await asyncio.gather(*(talker.answer() for talker in talkers))
        await asyncio.sleep(SETTLE_S)

    per_round = len(talkers)
    await rounds(args.warmup)
    done = args.warmup * per_round
    samples.append(server.sample("after warm-up", done))
    print(f"  warm-up: {done} answers", file=sys.stderr)
    target = done + args.answers
    while done < target:
        count = max(1, min(args.every, target - done) // per_round)
        await rounds(count)
        done += count * per_round
        samples.append(server.sample(f"after {done - args.warmup * per_round}", done))
        print(
            f"  {done - args.warmup * per_round} answers: workers RSS "
            + ", ".join(f"{p.role} {p.rss:.0f}" for p in samples[-1].processes),
            file=sys.stderr,
        )
    samples[-1].label = f"after {args.answers} answers"
    answered = sum(talker.answers for talker in talkers)
    seconds = sorted(s for talker in talkers for s in talker.seconds)
    print(
        f"  {answered} answers, median {seconds[len(seconds) // 2]:.1f} s each (send to "
        f"{'tts stop' if args.play_out else 'computed'}), {sum(t.spoken_chars for t in talkers) / answered:.0f} "
        "characters spoken per answer before the next",
        file=sys.stderr,
    )
    for talker in talkers:
        if talker.device.faults:
            print(f"  device {talker.device.device_id} faults: {talker.device.faults[:3]}", file=sys.stderr)
        await talker.device.close()
    return samples


def report(samples: list[Sample], args: argparse.Namespace) -> str:
    roles = [process.role for process in samples[0].processes]
    lines = [
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}; "
        f"config {args.config}, --workers {args.workers}",
        "MB: RSS / PSS / anonymous per process; total RSS and total PSS over all processes",
        "",
    ]
    head = f"{'':<22}" + "".join(f"{role:>22}" for role in roles) + f"{'total RSS':>11}{'total PSS':>11}"
    lines.append(head)
    for sample in samples:
        cells = "".join(f"{f'{p.rss:.0f} / {p.pss:.0f} / {p.anon:.0f}':>22}" for p in sample.processes)
        lines.append(f"{sample.label:<22}{cells}{sample.total('rss'):>11.0f}{sample.total('pss'):>11.0f}")
    warm, last = samples[1], samples[-1]
    growth = ", ".join(f"{b.role} {b.rss - a.rss:+.0f} MB RSS" for a, b in zip(warm.processes, last.processes))
    lines += ["", f"growth from warm-up to the end ({last.answers - warm.answers} answers): {growth}"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--config", type=Path, default=ROOT / "config.yaml", help="server config (default: config.yaml)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes, one device each (default 2)")
    parser.add_argument(
        "--answers", type=int, default=200, help="answers after warm-up, over all devices (default 200)"
    )
    parser.add_argument(
        "--warmup", type=int, default=10, help="warm-up answers per device (default 10: a full history)"
    )
    parser.add_argument("--every", type=int, default=50, help="answers between samples (default 50)")
    parser.add_argument("--play-out", action="store_true", help="wait for each reply's tts stop (real time: slow)")
    parser.add_argument("--json", type=Path, help="also write the samples here")
    args = parser.parse_args()
    children = Children()
    with tempfile.TemporaryDirectory(prefix="vixio-bench-memory-") as tmp:
        server = Server(children, args.config, args.workers, Path(tmp))
        server.start()
        try:
            asyncio.run(server.wait_ready())
            time.sleep(3.0)  # loading is over; let the workers settle before the idle sample
            samples = asyncio.run(drive(server, args))
        except BaseException:
            print(server.log_tail(), file=sys.stderr)
            raise
        finally:
            code = server.stop()
        print(report(samples, args))
        if code != 0:
            print(f"note: vixio serve exited with {code} after SIGINT", file=sys.stderr)
        if args.json is not None:
            args.json.write_text(
                json.dumps(
                    {
                        "cpu": cpu_model(),
                        "cores": os.cpu_count(),
                        "args": {
                            "config": str(args.config),
                            "workers": args.workers,
                            "answers": args.answers,
                            "warmup": args.warmup,
                            "play_out": args.play_out,
                        },
                        "samples": [asdict(sample) for sample in samples],
                    },
                    indent=1,
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
