"""Fleet benchmark (issue #27; not a test): two instances behind HAProxy against one with two workers.

    .venv/bin/python bench/bench_fleet.py [--n 100 200] [--turns 3] [--shape staggered burst]
        [--json out.json]

The same machine, the same two cores, the same shared real `redis-server` (vixio/testing/
redis_server.py; `state: {backend: redis, url: ...}`: history, memory and the session directory
in Redis), the same load, two ways to spread it:

- fleet: 2 × `vixio serve --workers 1` behind HAProxy running deploy/haproxy.cfg (TCP mode,
  leastconn; vixio/testing/fleet.py), the devices connecting to HAProxy; each instance pinned to
  a core of its own (`--no-pin`: both see both cores), as on two one-core machines: an instance
  that sees a spare core moves its Opus encoding to a thread, which costs ~0.1 ms more CPU per
  frame and is not what a fleet of separate machines would run;
- single: 1 × `vixio serve --workers 2`, the devices connecting to it directly.

The load and its report are bench/bench_capacity.py's (bench/capacity_*.py): N firmware-like
devices streaming real-time Opus through real Silero VAD, the fakes of bench/capacity/fakes.py
for ASR, LLM and TTS, latency = last speech frame sent → first answer audio, CPU per session per
60 ms frame from /proc (for the fleet: both instances and HAProxy; HAProxy's share is printed
too), the in-run floor (bench/capacity/floor.py) and the load average beside every figure.

Before each load, N other devices connect, say hello, answer MCP `initialize` and `tools/list`
and leave (bench/capacity/idle.py, 100 handshakes in flight): the session start p95 (connect →
the server's hello) and what a session costs Redis (start and end). Redis's own counters
(`INFO`: commands, read events, CPU; capacity.fleet.RedisCounters) are read around both: a read
event is one pipeline, i.e. one round trip, since vixio's store sends the calls of one moment
together. Each figure is net of the idle traffic (the heartbeats and the bus's member refresh,
measured first with no device connected) over the seconds it was taken in, waits for quiet
included: per session start = (that window's − idle) / N, per turn = (the load's − idle − N × one
session's) / turns.

Printed per N and configuration, then the fleet ÷ single ratios of p95 and CPU per frame
(issue #27's target: within 10 %) and a table. The host is shared: the load average says how
busy it was, and latencies say more about the machine than about vixio when it is high.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from bench_idle import IdleClients  # noqa: E402
from capacity.fleet import FleetProcess, LoopThread, RedisCounters, RedisSample  # noqa: E402
from capacity.floor import cpu_model, measure_floor  # noqa: E402
from capacity.load import build_clips  # noqa: E402
from capacity.procs import Children  # noqa: E402
from capacity.report import format_or_dash, print_summary, server_marks, server_stages  # noqa: E402
from capacity.server import ServerUnderLoad, VixioServerProcess, start_fakes  # noqa: E402

CONFIGURATIONS = ("fleet", "single")


BACKGROUND_S = 10.0
"""Seconds the idle traffic is measured over: one whole period of the directory's heartbeat
(`server.directory_ttl / 3`), several of the bus's member refresh (2 s), so each is counted whole."""


def _settled(
    redis: RedisCounters, background: dict[str, float], quiet_s: float = 1.0, limit_s: float = 30.0
) -> tuple[RedisSample, float]:
    """Redis's counters once only the idle traffic reached it for `quiet_s` (sessions closing write
    last), and when (time.monotonic()). The bus and the directory talk to Redis every second or two
    whoever is connected, so "quiet" is no more than the INFO and twice the idle rate."""
    allowance = 1 + 2 * background["commands"] * quiet_s
    deadline = time.monotonic() + limit_s
    last = redis.sample()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = redis.sample()
        if now.commands - last.commands <= allowance:
            return now, time.monotonic()
        last = now
    return last, time.monotonic()


def background_rate(redis: RedisCounters, seconds: float = BACKGROUND_S) -> dict[str, float]:
    """Round trips and commands per second while no device is connected: the workers' heartbeats
    and the fleet bus's member refresh."""
    before, started = redis.sample(), time.monotonic()
    time.sleep(seconds)
    delta = RedisCounters.delta(before, redis.sample())
    wall = time.monotonic() - started
    return {"round_trips": delta.reads / wall, "commands": delta.commands / wall}


def net(delta: RedisSample, background: dict[str, float], seconds: float) -> dict[str, float]:
    """`delta`'s round trips and commands less the idle traffic of those `seconds`."""
    return {
        "round_trips": delta.reads - background["round_trips"] * seconds,
        "commands": delta.commands - background["commands"] * seconds,
    }


def session_starts(
    children: Children, server: ServerUnderLoad, redis: RedisCounters, n: int, background: dict[str, float]
) -> dict[str, Any]:
    """N devices connect (hello, MCP listing) and leave: the hello p95 and Redis per session (less
    the idle traffic of the seconds each took, waits for quiet included)."""
    before, t0 = _settled(redis, background)
    clients = IdleClients(children, server.ws_url)
    try:
        answer = clients.add(n)
        started, t1 = _settled(redis, background)
    finally:
        clients.close()
    ended, t2 = _settled(redis, background)
    start, end = RedisCounters.delta(before, started), RedisCounters.delta(started, ended)
    start_net, end_net = net(start, background, t1 - t0), net(end, background, t2 - t1)
    return {
        "devices": answer["connected"],
        "failed": answer["failed_count"],
        "hello_ms": answer["hello_ms"],
        "redis_per_start": {key: value / n for key, value in start_net.items()}
        | {"by_command": {k: round(v / n, 2) for k, v in start.by_command.items()}},
        "redis_per_end": {key: value / n for key, value in end_net.items()}
        | {"by_command": {k: round(v / n, 2) for k, v in end.by_command.items()}},
    }


def run_configuration(
    children: Children,
    loop: LoopThread,
    name: str,
    n: int,
    args: argparse.Namespace,
    fakes_url: str,
    fakes: Any,
    redis_url: str,
    redis: RedisCounters,
    tmp: Path,
    clips: list[Any],
) -> dict[str, Any]:
    from vixio.testing.redis_server import FLEET_SECRET

    overrides = {
        "state": {"backend": "redis", "url": redis_url, "fleet_secret": FLEET_SECRET},
        "xiaozhi": {"max_connections": 4 * n + 100},
    }
    redis.reset()
    folder = tmp / f"{name}-n{n}"
    folder.mkdir()
    server: FleetProcess | VixioServerProcess
    if name == "fleet":
        server = FleetProcess(
            loop,
            folder,
            fakes_url,
            instances=2,
            workers=1,
            log_level=args.server_log_level,
            overrides=overrides,
            pin=args.pin,
        )
    else:
        server = VixioServerProcess(
            children, folder, fakes_url, _env(), workers=2, log_level=args.server_log_level, overrides=overrides
        )
    burst = (
        None
        if args.shape == "staggered"
        else {"window": args.burst_window, "period": args.burst_period, "lead": args.stagger + 1.5}
    )
    with server:
        server.wait_quiet(time.monotonic() + 120)
        server.warm_up()
        background = background_rate(redis)
        starts = session_starts(children, server, redis, n, background)
        server.wait_quiet(time.monotonic() + 30)
        floor = measure_floor(clips)
        haproxy_before = server.haproxy.usage().cpu_s if isinstance(server, FleetProcess) else 0.0
        before, load_started = _settled(redis, background)
        summary = run_load(
            children, server, fakes, n, args.turns, args.stagger, args.generators, folder, burst=burst, floor=floor
        )
        after, load_ended = _settled(redis, background)
        load = RedisCounters.delta(before, after)
        load_s = load_ended - load_started
        if isinstance(server, FleetProcess):
            summary["haproxy_cpu_s"] = round(server.haproxy.usage().cpu_s - haproxy_before, 2)
        summary["server_log"] = server.log_problems()
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for index, log in enumerate(server.log_paths):
                shutil.copyfile(log, args.keep_logs / f"{name}-n{n}-{index}.log")
        marks = server.turn_marks()
        summary["server_stages_ms"] = server_stages(marks)
        summary["server_marks_ms"] = server_marks(marks)
    turns = n * args.turns
    per_session = {
        key: starts["redis_per_start"][key] + starts["redis_per_end"][key] for key in ("round_trips", "commands")
    }
    # What the load cost beyond the workers' heartbeats (a rate) and its sessions' starts and ends.
    per_turn = {
        key: (value - background[key] * load_s - n * per_session[key]) / turns
        for key, value in (("round_trips", load.reads), ("commands", load.commands))
    }
    summary.update(
        configuration=name,
        workers=2,
        shape=args.shape,
        memory="on",
        session_start=starts,
        redis={
            "load": {
                "round_trips": load.reads,
                "commands": load.commands,
                "cpu_s": round(load.cpu_s, 3),
                "seconds": round(load_s, 1),
                "by_command": load.by_command,
            },
            "background_per_s": background,
            "per_turn": per_turn,
            "cpu_ms_per_turn": 1000 * load.cpu_s / turns,
        },
    )
    return summary


def print_fleet(summary: dict[str, Any]) -> None:
    print(
        f"--- {summary['configuration']}: "
        + ("2 instances × 1 worker behind HAProxy" if summary["configuration"] == "fleet" else "1 instance × 2 workers")
    )
    print_summary(summary)
    starts, redis = summary["session_start"], summary["redis"]
    print(
        f"  session start (connect -> server hello, {starts['devices']} devices, 100 in flight): "
        f"p50 {starts['hello_ms']['p50']} / p95 {starts['hello_ms']['p95']} ms; Redis per session start "
        f"{starts['redis_per_start']['round_trips']:.1f} round trips ({starts['redis_per_start']['commands']:.1f} commands: "
        f"{starts['redis_per_start']['by_command']}), per session end {starts['redis_per_end']['round_trips']:.1f} "
        f"({starts['redis_per_end']['commands']:.1f} commands)"
    )
    print(
        f"  Redis per turn: {redis['per_turn']['round_trips']:.2f} round trips, {redis['per_turn']['commands']:.2f} "
        f"commands (less the heartbeats, {redis['background_per_s']['round_trips']:.2f} round trips/s, and the "
        f"sessions' starts and ends), {redis['cpu_ms_per_turn']:.3f} ms of redis-server CPU (everything in the load's "
        f"{redis['load']['seconds']:.0f} s); the load's commands {redis['load']['by_command']}"
    )
    if "haproxy_cpu_s" in summary:
        print(f"  HAProxy: {summary['haproxy_cpu_s']:.2f} s CPU over the load (inside the server CPU above)")
    sys.stdout.flush()


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def print_table(summaries: list[dict[str, Any]]) -> None:
    m = summaries[0]["machine"]
    print(
        f"\nsummary (CPU: {m['cpu']}, {m['cores']} cores, shared with other helpers' work; floor = Opus decode + "
        "Silero VAD per 60 ms frame, one thread, this run; load = 1-min load average before / after)"
    )
    print(
        "| N | configuration | p50 / p95 ms | CPU ms/session/frame | ÷ floor | floor ms | Redis round trips per turn "
        "| per session (start + end) | session start p95 ms | late frames | failed | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        lat, server, floor, m = s["latency_ms"], s["server"], s["floor"], s["machine"]
        st = s["session_start"]
        per_session = st["redis_per_start"]["round_trips"] + st["redis_per_end"]["round_trips"]
        print(
            f"| {s['n']} | {s['configuration']} | {format_or_dash(lat['p50'])} / {format_or_dash(lat['p95'])} | "
            f"{format_or_dash(server['cpu_ms_per_session_frame'], '.3f')} | "
            f"{format_or_dash(server.get('cpu_per_frame_vs_floor'), '.2f')} | "
            f"{floor['ms_per_frame']:.3f} | {s['redis']['per_turn']['round_trips']:.2f} | {per_session:.1f} | "
            f"{st['hello_ms']['p95']} | {s['downlink']['late']} | {s['turns']['failed']} | "
            f"{m['load_average_before']:.1f} / {m['load_average_after']:.1f} |"
        )
    print("\nfleet ÷ single (target: within 10 %):")
    for n in sorted({s["n"] for s in summaries}):
        pair = {s["configuration"]: s for s in summaries if s["n"] == n}
        if len(pair) == 2:
            fleet, single = pair["fleet"], pair["single"]
            # A figure is None (or a CPU reading 0) when the load window was too short to read it.
            p95 = ratio(fleet["latency_ms"]["p95"], single["latency_ms"]["p95"])
            cpu = ratio(fleet["server"]["cpu_ms_per_session_frame"], single["server"]["cpu_ms_per_session_frame"])
            print(f"  N={n}: p95 {format_or_dash(p95, '.2f')}, CPU per frame {format_or_dash(cpu, '.2f')}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="2 instances behind HAProxy against 1 instance with 2 workers, on one "
        "Redis; see the module docstring for what each number means."
    )
    parser.add_argument("--n", type=int, nargs="+", default=[100, 200], help="devices talking, one load each")
    parser.add_argument("--turns", type=int, default=3, help="turns per device")
    parser.add_argument(
        "--shape", choices=("staggered", "burst"), default="staggered", help="bench_capacity.py's load shape"
    )
    parser.add_argument("--stagger", type=float, default=2.0, help="seconds over which the devices connect")
    parser.add_argument("--burst-window", type=float, default=2.0)
    parser.add_argument("--burst-period", type=float, default=8.0)
    parser.add_argument("--configurations", nargs="+", choices=CONFIGURATIONS, default=list(CONFIGURATIONS))
    parser.add_argument("--generators", type=int, default=0, help="load generator processes (0: one per 100 devices)")
    parser.add_argument("--server-log-level", default="INFO")
    parser.add_argument("--keep-logs", metavar="DIR", type=Path, help="copy each server's log into DIR")
    parser.add_argument("--json", metavar="FILE", help="also write every summary to FILE")
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="let both fleet instances run on every core (by default each has one)",
    )
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.n) or args.turns < 1:
        parser.error("--n values and --turns must be at least 1")

    from vixio.testing import redis_server
    from vixio.testing.fleet import haproxy_path

    for why in (redis_server.missing(), None if haproxy_path() else "Debian package haproxy is not installed"):
        if why:
            print(f"cannot run: {why}", file=sys.stderr)
            return 2
    os.environ.update(_env())  # the fleet harness starts `vixio serve` with this process's environment
    children = Children()
    loop = LoopThread()
    summaries: list[dict[str, Any]] = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="vixio-bench-fleet-") as tmp:
        redis = redis_server.RedisServer.start(Path(tmp) / "redis")
        counters = RedisCounters(redis.url)
        try:
            fakes_url, fakes = start_fakes(children, _env())
            clips = build_clips()
            print(
                f"CPU: {cpu_model()}, {os.cpu_count()} cores, shared with other work; redis-server "
                f"{counters.client.info('server')['redis_version']} on loopback",
                flush=True,
            )
            for index, n in enumerate(args.n):
                # Alternate which configuration goes first, so a machine getting busier does not favour one.
                order = args.configurations if index % 2 == 0 else list(reversed(args.configurations))
                for name in order:
                    summary = run_configuration(
                        children, loop, name, n, args, fakes_url, fakes, redis.url, counters, Path(tmp), clips
                    )
                    print_fleet(summary)
                    summaries.append(summary)
                    failed += summary["turns"]["failed"]
            print_table(summaries)
        except KeyboardInterrupt:
            print("interrupted: stopping every child process", file=sys.stderr)
            return 130
        finally:
            counters.close()
            children.kill_all()
            redis.close()
            loop.close()
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
