"""Capacity benchmark (issue #10; not a test): N devices talking at once against `vixio serve`.

    .venv/bin/python bench/bench_capacity.py --n 1 30 60 100 --turns 3 [--workers K] [--json out.json]
        [--shape staggered burst] [--memory on off] [--providers zero slow offline]
        [--noise-dbfs -70] [--set vad.early_silence_ms=0 ...]
    .venv/bin/python bench/bench_capacity.py --isolation [--rounds 10]

Three kinds of processes, so each is measured alone:

1. fakes (bench/capacity/fakes.py): OpenAI-compatible ASR, LLM (streamed SSE, one sentence) and
   TTS (1.5 s of 24 kHz PCM per sentence) on loopback, all answering at once (`--providers zero`,
   the default: only the voice server's own work is timed) or as remote services would
   (`slow`: 300 ms to the model's first token, 150 ms to the first TTS audio, bench_latency's
   slower pair); `--providers zero slow` runs every load with both. `--providers offline`
   leaves the fakes idle and runs the shipped config.yaml's voice stack instead (its `vad`,
   `turn`, `asr`, `agent`, `tts` and `speech` sections: Whisper tiny.en, SmolLM2-135M and
   Piper on this machine's CPU), so the figures say how many devices the offline default serves
   at once, and whether one device's inference makes another's reply stutter (late frames);
2. the server: `python -m vixio serve --config <generated yaml>` from this checkout, with
   `asr.provider: openai`, `agent.provider: litellm` (model `openai/bench` on the fake),
   `tts.provider: openai` and real Silero VAD (`silero-onnx`) and Opus; `--workers K` is passed
   on when `vixio serve --help` offers it. A fresh server for every N; its log goes to a file
   (WARNING/ERROR lines are counted; its last lines are printed when a turn failed);
3. the load generator(s) (bench/capacity/load.py): N firmware-like devices, started over
   `--stagger` seconds, each doing `--turns` turns of real-time 60 ms Opus (0.3 s noise, a
   1.8 s spoken question, 1.5 s noise). One generator process per 100 devices unless
   `--generators G` says otherwise (bench/capacity/selfcheck.py checks the generator alone).

Two load shapes, each run for every N (`--shape`, both by default):

- staggered: the devices connect over `--stagger` seconds and do their turns back to back, each
  starting as soon as the previous reply has played (so only the first turns end together);
- burst: every turn, every device ends its sentence within the same `--burst-window` seconds
  (2 s), as a classroom answering together or homes after a broadcast would; a burst every
  `--burst-period` seconds (8 s, room for the replies to play). A turn whose slot passed while
  its previous reply still played starts at once and is counted ("missed their burst slot").

`--noise-dbfs` sets the devices' background (default about -55 dBFS, which the VAD scores; -70 is
a quiet room, whose silence `vad.quiet_below_dbfs` leaves unscored). `--set KEY=VALUE` merges a
config key (dotted path, YAML value) into every load's server config, to measure a setting.

`--memory on` (the default config: each turn stored in the SQLite state store, restored on a
resume) or `off` (memory.enabled false); `--memory on off` runs every load with both. The
server's state file lives in the benchmark's temporary folder, never in the checkout.

Before each load the server answers a typed warm-up turn (first-use imports are not timed),
then its idle memory is read and the floor is measured in this process (bench/capacity/floor.py:
Opus decode + Silero VAD of one 60 ms uplink frame, single-threaded, the machine as it is at that
moment). The CPU model, the machine's load average before and after, and the host's CPU during
the load (% busy, and % stolen by the hypervisor: on a VM, a neighbour's load slows everything
here and shows nowhere else) go beside every figure.
Printed per N (server = its process and all its workers, from /proc; the window runs from the
first device's start to the last turn's end):

- cpu/frame: server CPU ms (user + system) in the window / (N × uplink frames per session),
  i.e. CPU ms per session per 60 ms frame, and that divided by the floor;
- cores: server CPU seconds / wall seconds of the window; "waited ... runnable": time its
  threads were ready to run but had no CPU (large = the machine was busy with other work and
  the latencies say more about the machine than about vixio);
- RSS: idle (after warm-up), peak under load (sampled every 0.5 s), (peak − idle) / N per
  session; PSS (shared pages counted once, the honest sum for several workers) idle and
  while the sessions are open;
- latency p50/p95/max: last speech frame sent → first downlink audio frame received, per turn
  (it includes the 500 ms end-of-turn silence of the VAD); "by turn" splits it by each device's
  1st, 2nd, ... turn (devices that connect together end their first turns together, so turn 1
  carries that burst); "server" is the part between the VAD deciding the speech ended and the
  first answer frame sent, and each stage of it, from the per-turn latency marks in the server's
  log (the rest of the latency is the 500 ms silence, the VAD's delay in hearing it, and delivery);
- gap p99: the 99th percentile of the time between consecutive audio frames of one reply
  (~240 ms by design: after the pre-buffer the server sends frames four at a time, each group when
  its first frame is due; "late frames" is what tells whether the device ran dry);
- late frames: frames arriving after a device playing one frame per 60 ms (from the first
  frame of the reply) needed them: count and % of all reply frames;
- failed: turns with no answer audio within 15 s of the last speech frame (or no `tts stop`
  within 30 s of it and of the reply's latest audio frame, or a closed socket);
- server marks: asr_final, llm_first_token and first_frame_sent as ms after the VAD's speech end
  (p50 / p95), from the same log lines;
- generator send lateness p99/max: how late the devices sent their uplink frames (when the p99
  passes 30 ms the load was not real time and the run says so), the generators' and the
  fakes' CPU seconds.

Then `p95 / N=1 p95` for every N when N=1 was run (per shape, memory setting and provider pair), and a table of
every load. `--json FILE` writes every summary (with each turn's latency). A default run (N = 1,
30, 60, 100, both shapes) takes about 10 minutes.

`--isolation` instead times another session's typed turn (`listen detect` → first `stt`)
while a neighbour registers 600 tools or lists 1,000 device tools, against the same round
trip with no heavy neighbour, plus the worst `hello` round trip of a third session pinging
every 20 ms (see bench/capacity/isolation.py). It runs one worker unless `--workers` says
otherwise: with several, the supervisor hands the neighbour and the timed session to different
workers (the fewest connections first), and the isolation measured would be between processes.
Exits 1 when any turn failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for path in (str(ROOT), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

from capacity.fakes import PROVIDER_PAIRS  # noqa: E402
from capacity.floor import FloorProbe, cpu_model, measure_floor, python_build  # noqa: E402
from capacity.load import build_clips  # noqa: E402
from capacity.procs import Children, HostCpu, ProcessTree, Sampler  # noqa: E402
from capacity.report import print_ratios, print_summary, print_table, server_marks, server_stages, summarize  # noqa: E402
from capacity.server import ServerUnderLoad, VixioServerProcess, shipped_voice_stack, start_fakes  # noqa: E402

SHAPES = ("staggered", "burst")
OFFLINE = "offline"
"""`--providers offline`: the shipped config.yaml's local voice stack instead of the fakes."""
DEVICES_PER_GENERATOR = 100
"""Devices per generator process: on a busy 2-core machine one process kept real time for 100 devices
(send lateness p99 12 ms) but not for 200 (77 ms; two processes: 8 ms). See bench/capacity/selfcheck.py."""


def run_load(
    children: Children,
    server: ServerUnderLoad,
    fakes: ProcessTree,
    n: int,
    turns: int,
    stagger: float,
    generators: int,
    tmp: Path,
    *,
    burst: dict[str, float] | None = None,
    floor: dict[str, Any] | None = None,
    noise_dbfs: float | None = None,
) -> dict[str, Any]:
    """Run N devices against `server` and return the summary of that load: the staggered shape,
    or the burst shape when `burst` (capacity.load.burst_slots) is given. `floor`: the in-run
    floor measured just before (capacity.floor), put beside the server's CPU per frame."""
    generators = max(1, min(n, generators or math.ceil(n / DEVICES_PER_GENERATOR)))
    load_before = os.getloadavg()
    host_before = HostCpu.now()
    idle = server.tree.usage()
    idle_pss = server.tree.pss_bytes()
    threads_before = server.tree.thread_cpu()
    loaded_pss = 0
    # The floor is probed while the load runs too, and the server sampled. Both start before the
    # generators: the probe's own start (imports, the model, the clips) took longer than the
    # generators' lead on a busy machine (load average 15), and the whole load then ran before the
    # sampler's first reading (the server's CPU over it read 0).
    with FloorProbe() as probe, Sampler(server.tree) as sampler:
        start_at = time.monotonic() + 2.5 + 0.5 * generators  # time for the generators to import and encode
        procs, outs = [], []
        for g in range(generators):
            outs.append(tmp / f"load-{n}-{g}.json")
            spec = {
                "url": server.ws_url,
                "indices": list(range(g, n, generators)),
                "total": n,
                "turns": turns,
                "start_at": start_at,
                "stagger": stagger,
                "burst": burst,
                "noise_dbfs": noise_dbfs,
                "out": str(outs[-1]),
            }
            procs.append(
                children.start(
                    [sys.executable, str(BENCH / "capacity" / "load.py"), json.dumps(spec)], cwd=ROOT, env=_env()
                )
            )
        fakes_before = fakes.usage().cpu_s
        for index, proc in enumerate(procs):
            if index == 0:
                loaded_pss = _pss_before_exit(server, proc)
            if proc.wait() != 0:
                raise RuntimeError(f"load generator exited with {proc.returncode}")
            children.stop(proc)
    fakes_cpu = fakes.usage().cpu_s - fakes_before
    threads = {name: cpu - threads_before.get(name, 0.0) for name, cpu in server.tree.thread_cpu().items()}
    results = [json.loads(out.read_text()) for out in outs]
    records = [r for result in results for r in result["records"]]
    ends = [r["tts_stop"] or r["last_speech_sent"] for r in records if r["last_speech_sent"]]
    end_at = max(ends) if ends else sampler.samples[-1].time
    window = {
        "start": start_at,
        "end": end_at,
        "cpu_s": sampler.cpu_at(end_at) - sampler.cpu_at(start_at),
        "runqueue_wait_s": sampler.runqueue_wait_at(end_at) - sampler.runqueue_wait_at(start_at),
        "rss_idle": idle.rss_bytes,
        "rss_peak": sampler.peak_rss(start_at, end_at),
        "processes": idle.processes,
        "pss_idle": idle_pss,
        "pss_loaded": loaded_pss,
    }
    summary = summarize(n, turns, generators, window, results)
    summary["fakes_cpu_s"] = round(fakes_cpu, 2)
    frames = summary["generator"]["frames_sent"]
    if frames:  # the server's threads (every worker's summed), CPU ms per session per frame
        summary["server"]["cpu_ms_per_frame_by_thread"] = {
            name: round(1000 * cpu / frames, 4)
            for name, cpu in sorted(threads.items(), key=lambda kv: -kv[1])
            if cpu >= 0.05
        }
    summary["shape"] = "staggered" if burst is None else "burst"
    load_after = os.getloadavg()
    summary["machine"] = {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "python": python_build(),
        **HostCpu.now().since(host_before),
        "load_average_before": round(load_before[0], 2),
        "load_average_after": round(load_after[0], 2),
        "uptime_load_before": [round(x, 2) for x in load_before],
        "uptime_load_after": [round(x, 2) for x in load_after],
    }
    per_frame = summary["server"]["cpu_ms_per_session_frame"]
    if floor is not None:
        summary["floor"] = floor
        summary["server"]["cpu_per_frame_vs_floor"] = per_frame / floor["ms_per_frame"] if per_frame else None
    during = probe.during(start_at, end_at)
    if during is not None:
        summary["floor_during"] = during
        summary["server"]["cpu_per_frame_vs_floor_during"] = per_frame / during["ms_per_frame"] if per_frame else None
    return summary


def _pss_before_exit(server: ServerUnderLoad, generator: subprocess.Popen[Any]) -> int:
    """The server's PSS while its sessions are still open: read every 2 s until a generator
    exits (the devices close their sockets at the very end), the last reading wins."""
    pss = server.tree.pss_bytes()
    while True:
        try:
            generator.wait(2.0)
            return pss
        except subprocess.TimeoutExpired:
            pss = server.tree.pss_bytes()


def _keep_log(directory: Path | None, server: VixioServerProcess, name: str) -> None:
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(server.log_path, directory / name)


def config_settings(settings: list[str]) -> dict[str, Any]:
    """`--set` values as nested config overrides: `a.b=1` → {"a": {"b": 1}} (the value read as YAML)."""
    overrides: dict[str, Any] = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise ValueError(f"--set wants KEY=VALUE with a dotted KEY, got {setting!r}")
        node = overrides
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"--set {setting!r}: {part!r} was already given a value")
            node = child
        node[path[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    return overrides


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="N devices talking at once against `vixio serve`; see the "
        "module docstring for what each number means."
    )
    parser.add_argument("--n", type=int, nargs="+", default=[1, 30, 60, 100], help="device counts, one load each")
    parser.add_argument("--turns", type=int, default=3, help="turns per device")
    parser.add_argument(
        "--workers", type=int, default=None, help="passed to `vixio serve --workers` (only when the server offers it)"
    )
    parser.add_argument("--stagger", type=float, default=2.0, help="seconds over which the devices connect")
    parser.add_argument(
        "--shape",
        nargs="+",
        choices=SHAPES,
        default=list(SHAPES),
        help="load shapes, each run for every N: staggered (turns back to back from a staggered "
        "connect) and burst (every device ends its sentence within --burst-window, every turn)",
    )
    parser.add_argument(
        "--burst-window", type=float, default=2.0, help="burst: seconds within which every device ends its sentence"
    )
    parser.add_argument(
        "--burst-period",
        type=float,
        default=8.0,
        help="burst: seconds from one turn's burst to the next (room for the replies to play)",
    )
    parser.add_argument(
        "--memory",
        nargs="+",
        choices=("on", "off"),
        default=["on"],
        help="memory.enabled of the server (on: conversations stored in SQLite, the default "
        "config); `--memory on off` runs every load with both",
    )
    parser.add_argument(
        "--providers",
        nargs="+",
        choices=[*sorted(PROVIDER_PAIRS), OFFLINE],
        default=["zero"],
        help="how fast the fake services answer: zero (at once) or slow (300 ms to the model's "
        "first token, 150 ms to the first TTS audio, as bench_latency's slow pair); offline: "
        "the shipped config.yaml's local models instead; every load is run with each",
    )
    parser.add_argument(
        "--generators",
        type=int,
        default=0,
        help=f"load generator processes (0: one per {DEVICES_PER_GENERATOR} devices)",
    )
    parser.add_argument("--server-log-level", default="INFO", help="the server's log level (as an operator runs it)")
    parser.add_argument(
        "--noise-dbfs",
        type=float,
        default=None,
        help="the devices' background level between and around their questions (default about -55 "
        "dBFS, above the VAD's quiet level; -70: a quiet room, whose silence the VAD skips)",
    )
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="settings",
        help="a server config key (dotted path) and its YAML value, merged into every load's "
        "config, e.g. --set vad.early_silence_ms=0 --set pipeline.prewarm=false; repeatable",
    )
    parser.add_argument(
        "--isolation",
        action="store_true",
        help="time a typed turn next to a 600-tool registration / 1,000-tool listing instead",
    )
    parser.add_argument("--rounds", type=int, default=10, help="--isolation: typed turns timed per phase")
    parser.add_argument("--keep-logs", metavar="DIR", type=Path, help="copy each server's log into DIR")
    parser.add_argument("--json", metavar="FILE", help="also write every summary to FILE")
    args = parser.parse_args(argv)
    try:
        overrides = config_settings(args.settings)
    except ValueError as exc:
        parser.error(str(exc))
    if any(n < 1 for n in args.n) or args.turns < 1 or args.rounds < 1:
        parser.error("--n values, --turns and --rounds must be at least 1")

    children = Children()
    summaries: list[dict[str, Any]] = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="vixio-bench-") as tmp:
        try:
            if args.isolation:
                fakes_url, fakes = start_fakes(children, _env())
                from capacity.isolation import run_isolation

                workers = 1 if args.workers is None else args.workers  # the neighbour in the same process
                with VixioServerProcess(
                    children, Path(tmp), fakes_url, _env(), workers=workers, log_level=args.server_log_level
                ) as server:
                    server.warm_up()
                    summary = run_isolation(server.ws_url, args.rounds)
                _keep_log(args.keep_logs, server, "server-isolation.log")
                summaries.append(summary)
                failed += summary.get("failed", 0)
            else:
                clips = build_clips(args.noise_dbfs)
                print(
                    f"CPU: {cpu_model()}, {os.cpu_count()} cores; Python: {python_build()}; floor = Opus decode + "
                    "Silero VAD of one 60 ms uplink frame, single-threaded, measured before each load and probed "
                    "once a second during it (bench/capacity/floor.py)"
                )
                runs = [
                    (pair, memory, shape) for pair in args.providers for memory in args.memory for shape in args.shape
                ]
                services: dict[str, tuple[str, ProcessTree]] = {}
                for pair, memory, shape in runs:
                    if pair not in services:  # offline: the fakes run, idle, so every load is measured alike
                        services[pair] = start_fakes(children, _env(), PROVIDER_PAIRS.get(pair, (0.0, 0.0)))
                    fakes_url, fakes = services[pair]
                    voice = shipped_voice_stack() if pair == OFFLINE else None
                    burst = (
                        None
                        if shape == "staggered"
                        else {"window": args.burst_window, "period": args.burst_period, "lead": args.stagger + 1.5}
                    )
                    group = []
                    for n in args.n:
                        with VixioServerProcess(
                            children,
                            Path(tmp),
                            fakes_url,
                            _env(),
                            workers=args.workers,
                            log_level=args.server_log_level,
                            memory=memory == "on",
                            voice=voice,
                            overrides=overrides,
                        ) as server:
                            server.warm_up()
                            floor = measure_floor(clips)
                            summary = run_load(
                                children,
                                server,
                                fakes,
                                n,
                                args.turns,
                                args.stagger,
                                args.generators,
                                Path(tmp),
                                burst=burst,
                                floor=floor,
                                noise_dbfs=args.noise_dbfs,
                            )
                            summary["memory"] = memory
                            summary["providers"] = pair
                            summary["workers"] = server.workers
                            if args.settings:
                                summary["settings"] = args.settings
                            if args.noise_dbfs is not None:
                                summary["noise_dbfs"] = args.noise_dbfs
                            summary["server_log"] = server.log_problems()
                            marks = server.turn_marks()
                            summary["server_stages_ms"] = server_stages(marks)
                            summary["server_marks_ms"] = server_marks(marks)
                            if summary["turns"]["failed"]:
                                print(f"server log, last lines:\n{server.log_tail()}", file=sys.stderr)
                        _keep_log(args.keep_logs, server, f"server-{pair}-{memory}-{shape}-n{n}.log")
                        print_summary(summary)
                        group.append(summary)
                        failed += summary["turns"]["failed"]
                    print_ratios(group)
                    summaries.extend(group)
                print_table(summaries)
        except KeyboardInterrupt:
            print("interrupted: stopping every child process", file=sys.stderr)
            return 130
        finally:
            children.kill_all()
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2))
    if failed:
        print(f"FAILED: {failed} turn(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
