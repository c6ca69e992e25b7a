"""Connected-idle devices (issue #27; not a test): how many silent devices one worker holds.

    .venv/bin/python bench/bench_idle.py [--devices 5000] [--step 1000] [--turns 10] [--idle-seconds 30]
        [--workers 1] [--json out.json]

Between conversations a Xiaozhi device keeps its WebSocket open and sends nothing. A fleet of
10,000 devices is mostly such devices, so what one of them costs the server decides how many
instances a fleet needs as much as the devices talking at once do.

One `vixio serve --workers 1` (`xiaozhi.idle_timeout: 0`, as an operator keeping devices
connected runs it; `max_connections` raised past `--devices`) with the fakes of
bench/capacity/fakes.py and real Silero VAD and Opus, as bench/bench_capacity.py runs it. One
client process (bench/capacity/idle.py) connects the idle devices `--step` at a time: each says
hello, answers MCP `initialize` and `tools/list` with the firmware's six tools, then is silent.
The server's figures come from /proc (its process and its workers), so the client's CPU is
never counted:

- RSS and PSS of the server after each step, once the server is quiet again; the growth per
  1,000 idle devices (least squares over the steps) and how many idle devices fit in 1 GB of
  RSS at that rate (the worker's RSS before any device included);
- the idle CPU: server CPU over `--idle-seconds` with every device connected and silent, as a
  share of one core, against the same window before any device connected, and the server's
  wake-ups (voluntary context switches) per second in both;
- a talking device's latency (bench/capacity/load.py, `--turns` turns back to back: last speech
  frame sent -> first answer audio, p50/p95, and the server's marks) with no idle device, then
  among all the idle ones;
- the connect time of each step and the hello round trip p50/p95 of its devices.

The CPU model, the in-run floor (bench/capacity/floor.py) and the load average go beside the
figures: the host is shared, and a busy machine lengthens latencies, not the CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for path in (str(ROOT), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_capacity import _env, run_load  # noqa: E402
from capacity.floor import cpu_model, measure_floor  # noqa: E402
from capacity.load import build_clips  # noqa: E402
from capacity.procs import Children, ProcessTree  # noqa: E402
from capacity.report import server_marks  # noqa: E402
from capacity.server import VixioServerProcess, start_fakes  # noqa: E402

MB = 2**20
GB = 2**30


def context_switches(tree: ProcessTree) -> int:
    """Voluntary context switches of every thread of the tree: each is a wake-up after a wait."""
    total = 0
    for pid in tree.pids():
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
            except OSError:
                continue
    return total


def largest_rss(tree: ProcessTree) -> int:
    """RSS of the tree's largest process (the worker, when a supervisor runs beside it)."""
    largest = 0
    for pid in tree.pids():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    largest = max(largest, int(line.split()[1]) * 1024)
        except OSError:
            continue
    return largest


def idle_window(tree: ProcessTree, seconds: float) -> dict[str, float]:
    """Server CPU (share of one core) and wake-ups per second over `seconds` of nothing happening."""
    before, switches = tree.usage(), context_switches(tree)
    time.sleep(seconds)
    after, switches_after = tree.usage(), context_switches(tree)
    wall = after.time - before.time
    return {
        "cpu_pct_of_core": round(100 * (after.cpu_s - before.cpu_s) / wall, 2),
        "wakeups_per_s": round((switches_after - switches) / wall, 1),
        "seconds": round(wall, 1),
    }


def slope_per_1000(points: list[tuple[int, int]]) -> float:
    """Least-squares bytes per 1,000 devices over (devices, bytes) points."""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / var


class IdleClients:
    """bench/capacity/idle.py as a child process, driven line by line."""

    def __init__(self, children: Children, url: str) -> None:
        self.proc = children.start(
            [sys.executable, str(BENCH / "capacity" / "idle.py"), url],
            cwd=ROOT,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children = children

    def add(self, count: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"add {count}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the idle clients exited ({self.proc.wait()})")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                pass
        self.children.stop(self.proc)


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2)}


def talking(
    children: Children, server: VixioServerProcess, fakes: ProcessTree, turns: int, tmp: Path, floor: dict[str, Any]
) -> dict[str, Any]:
    """One device talking `turns` turns back to back (bench_capacity's load, N = 1)."""
    marks_before = len(server.turn_marks())
    summary = run_load(children, server, fakes, 1, turns, 0.0, 1, tmp, floor=floor)
    summary["server_marks_ms"] = server_marks(server.turn_marks()[marks_before:])
    return summary


def run(args: argparse.Namespace) -> dict[str, Any]:
    children = Children()
    report: dict[str, Any] = {"devices": args.devices, "step": args.step, "workers": args.workers, "steps": []}
    overrides = {"xiaozhi": {"idle_timeout": 0, "max_connections": args.devices + 100}}
    clips = build_clips()
    with tempfile.TemporaryDirectory(prefix="vixio-bench-idle-") as tmp:
        try:
            fakes_url, fakes = start_fakes(children, _env())
            with VixioServerProcess(
                children,
                Path(tmp),
                fakes_url,
                _env(),
                workers=args.workers,
                log_level=args.server_log_level,
                overrides=overrides,
            ) as server:
                server.warm_up()
                floor = measure_floor(clips)
                report["floor"] = floor
                report["machine_start"] = machine()
                report["talk_alone"] = talking(children, server, fakes, args.turns, Path(tmp), floor)
                server.wait_quiet(time.monotonic() + 30)
                report["idle_none"] = idle_window(server.tree, args.idle_seconds)
                base = server.tree.usage()
                report["rss_start_mb"] = base.rss_bytes / MB
                report["worker_rss_start_mb"] = largest_rss(server.tree) / MB
                report["pss_start_mb"] = server.tree.pss_bytes() / MB
                points = [(0, base.rss_bytes)]
                clients = IdleClients(children, server.ws_url)
                try:
                    total = 0
                    while total < args.devices:
                        count = min(args.step, args.devices - total)
                        answer = clients.add(count)
                        total += count
                        server.wait_quiet(time.monotonic() + 60)
                        usage = server.tree.usage()
                        step = {
                            "devices": total,
                            "connected": answer["connected"],
                            "failed": answer["failed_count"],
                            "failures": answer["failed"],
                            "connect_s": answer["seconds"],
                            "hello_ms": answer["hello_ms"],
                            "unexpected": answer["unexpected"],
                            "rss_mb": round(usage.rss_bytes / MB, 1),
                            "worker_rss_mb": round(largest_rss(server.tree) / MB, 1),
                            "pss_mb": round(server.tree.pss_bytes() / MB, 1),
                            "load_average": machine()["load_average"],
                        }
                        report["steps"].append(step)
                        points.append((answer["connected"], usage.rss_bytes))
                        print(
                            f"{total:>6d} idle: {step['connected']} connected ({step['failed']} failed) in "
                            f"{step['connect_s']:.1f} s, hello p50/p95 {step['hello_ms']['p50']} / "
                            f"{step['hello_ms']['p95']} ms; server RSS {step['rss_mb']:.0f} MB (worker "
                            f"{step['worker_rss_mb']:.0f}), PSS {step['pss_mb']:.0f} MB; load {step['load_average']}",
                            flush=True,
                        )
                        if answer["failed_count"]:
                            print(f"  failures: {answer['failed']}", flush=True)
                    report["idle_all"] = idle_window(server.tree, args.idle_seconds)
                    report["talk_among_idle"] = talking(children, server, fakes, args.turns, Path(tmp), floor)
                    report["server_log"] = server.log_problems()
                finally:
                    clients.close()
                per_1000 = slope_per_1000(points)
                report["rss_per_1000_mb"] = round(per_1000 / MB, 1)
                report["idle_per_gb"] = int(1000 * GB / per_1000) if per_1000 > 0 else None
                worker_start = report["worker_rss_start_mb"] * MB
                report["idle_under_1gb"] = int(1000 * (GB - worker_start) / per_1000) if per_1000 > 0 else None
                report["machine_end"] = machine()
        finally:
            children.kill_all()
    return report


def print_report(r: dict[str, Any]) -> None:
    floor, m0, m1 = r["floor"], r["machine_start"], r["machine_end"]
    print(
        f"\nCPU: {m0['cpu']}, {m0['cores']} cores, shared with other work (load average {m0['load_average']} at the "
        f"start, {m1['load_average']} at the end); floor {floor['ms_per_frame']:.3f} ms per 60 ms frame "
        f"(Opus decode + Silero VAD, one thread, this run)"
    )
    print(
        f"server: --workers {r['workers']}, RSS {r['rss_start_mb']:.0f} MB before any idle device "
        f"(worker {r['worker_rss_start_mb']:.0f} MB), PSS {r['pss_start_mb']:.0f} MB"
    )
    print(
        f"memory: {r['rss_per_1000_mb']:.1f} MB RSS per 1,000 idle devices; {r['idle_per_gb']} idle devices per GB; "
        f"one worker holds {r['idle_under_1gb']} under 1 GB RSS"
    )
    none, full = r["idle_none"], r.get("idle_all") or {}
    print(
        f"idle CPU: {none['cpu_pct_of_core']:.2f} % of a core with no device, "
        f"{full.get('cpu_pct_of_core', float('nan')):.2f} % with {r['devices']} idle "
        f"({none['wakeups_per_s']:.0f} -> {full.get('wakeups_per_s', float('nan')):.0f} wake-ups/s, "
        f"{none['seconds']:.0f} s windows)"
    )
    for name, title in (
        ("talk_alone", "talking, no idle device"),
        ("talk_among_idle", f"talking among {r['devices']} idle"),
    ):
        s = r.get(name)
        if not s:
            continue
        lat, marks = s["latency_ms"], s.get("server_marks_ms") or {}
        first = marks.get("first_frame_sent") or {}
        print(
            f"{title}: p50 {lat['p50']} ms, p95 {lat['p95']} ms ({lat['count']} turns, {s['turns']['failed']} failed); "
            f"server speech end -> first frame sent p50/p95 {_f(first.get('p50'))} / {_f(first.get('p95'))} ms; "
            f"load {s['machine']['load_average_before']} / {s['machine']['load_average_after']}"
        )
    print("\n| idle devices | connected | server RSS MB | worker RSS MB | PSS MB | connect s | hello p95 ms | load |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| 0 | 0 | {r['rss_start_mb']:.0f} | {r['worker_rss_start_mb']:.0f} | {r['pss_start_mb']:.0f} | - | - | "
        f"{m0['load_average']} |"
    )
    for s in r["steps"]:
        print(
            f"| {s['devices']} | {s['connected']} | {s['rss_mb']:.0f} | {s['worker_rss_mb']:.0f} | {s['pss_mb']:.0f} | "
            f"{s['connect_s']:.1f} | {s['hello_ms']['p95']} | {s['load_average']} |"
        )
    sys.stdout.flush()


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Connected-idle devices against one `vixio serve` worker; see the "
        "module docstring for what each number means."
    )
    parser.add_argument("--devices", type=int, default=5000, help="idle devices in all")
    parser.add_argument("--step", type=int, default=1000, help="idle devices connected between two memory readings")
    parser.add_argument("--turns", type=int, default=10, help="turns of the talking device, alone and among the idle")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="window of the idle CPU readings")
    parser.add_argument("--workers", type=int, default=1, help="passed to `vixio serve --workers`")
    parser.add_argument("--server-log-level", default="INFO")
    parser.add_argument("--json", metavar="FILE", help="also write the report to FILE")
    args = parser.parse_args(argv)
    if args.devices < 1 or args.step < 1 or args.turns < 1:
        parser.error("--devices, --step and --turns must be at least 1")
    try:
        report = run(args)
    except KeyboardInterrupt:
        print("interrupted: stopping every child process", file=sys.stderr)
        return 130
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    failed = sum(s["failed"] for s in report["steps"]) + sum(
        (report.get(k) or {}).get("turns", {}).get("failed", 0) for k in ("talk_alone", "talk_among_idle")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
