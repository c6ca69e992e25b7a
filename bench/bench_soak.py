"""Soak benchmark (issue 25 §5; not a test): does `vixio serve --workers K` keep its memory flat
over thousands of short sessions?

    .venv/bin/python bench/bench_soak.py --cycles 5000 [--workers 2] [--concurrency 8] [--json out.json]

The server runs as bench_capacity.py runs it (bench/capacity/server.py: fake ASR, LLM and TTS on
loopback, real Silero VAD and Opus, a fresh `python -m vixio serve` of this checkout, its state
database in a temporary folder). Each cycle opens three WebSocket connections, the three ways
devices leave (as one of `--devices` devices that keep coming back):

1. typed turn: hello, `listen detect <question>`, the whole spoken reply up to `tts stop`, a
   normal close;
2. abrupt drop: hello, the same question, and the TCP connection torn down (no close frame)
   as the reply's first audio arrives;
3. no hello: the handshake, then the TCP connection torn down without a word.

`--concurrency` cycles run at once. Every `--sample-every` cycles (after the sessions of that
batch have closed) the resident memory of the supervisor and of each worker is read from /proc.
Printed: the samples, then the growth per 1,000 cycles fitted (least squares) over everything
after the warm-up (`--warmup`, a fraction of the cycles) and over the last quarter alone, per
process and summed. Flat means the fit is within noise (a few MB) — allocator arenas settle
in the first thousand or so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets
import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from capacity.fakes import QUESTION  # noqa: E402
from capacity.procs import PAGE, Children, ProcessTree, _read_stat  # noqa: E402
from capacity.server import READY_TIMEOUT_S, VixioServerProcess  # noqa: E402

HELLO = {
    "type": "hello",
    "version": 1,
    "transport": "websocket",
    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
}
TURN_TIMEOUT = 30.0


DEVICES = 16
"""Device ids the cycles cycle through (`--devices`): the same devices coming back, as in a home or
a fleet; a new id every cycle would grow the stored history with the count of devices instead."""


def _headers(cycle: int, kind: int) -> dict[str, str]:
    device = cycle % DEVICES
    return {
        "Device-Id": f"02:50:{kind:02x}:00:{device // 256:02x}:{device % 256:02x}",
        "Client-Id": f"soak-{kind}-{device}",
        "Protocol-Version": "1",
    }


async def _hello(ws: Any) -> None:
    await ws.send(json.dumps(HELLO))
    while True:
        message = await ws.recv()
        if isinstance(message, str) and json.loads(message).get("type") == "hello":
            return


async def typed_turn(url: str, cycle: int) -> None:
    async with websockets.connect(url, additional_headers=_headers(cycle, 1), open_timeout=10) as ws:
        await _hello(ws)
        await ws.send(json.dumps({"type": "listen", "state": "detect", "text": QUESTION}))
        async with asyncio.timeout(TURN_TIMEOUT):
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    data = json.loads(message)
                    if data.get("type") == "tts" and data.get("state") == "stop":
                        return


async def abrupt_drop(url: str, cycle: int) -> None:
    ws = await websockets.connect(url, additional_headers=_headers(cycle, 2), open_timeout=10)
    try:
        await _hello(ws)
        await ws.send(json.dumps({"type": "listen", "state": "detect", "text": QUESTION}))
        async with asyncio.timeout(TURN_TIMEOUT):
            while not isinstance(await ws.recv(), bytes):  # the reply's first audio frame
                pass
    finally:
        ws.transport.abort()


async def no_hello(url: str, cycle: int) -> None:
    ws = await websockets.connect(url, additional_headers=_headers(cycle, 3), open_timeout=10)
    await asyncio.sleep(0.05)
    ws.transport.abort()


async def run_cycles(url: str, first: int, count: int, concurrency: int) -> list[str]:
    """`count` cycles, `concurrency` at once; returns the failures."""
    failures: list[str] = []
    gate = asyncio.Semaphore(concurrency)

    async def cycle(index: int) -> None:
        async with gate:
            for kind in (typed_turn, abrupt_drop, no_hello):
                try:
                    await kind(url, index)
                except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                    failures.append(f"cycle {index} {kind.__name__}: {type(exc).__name__}: {exc}")

    await asyncio.gather(*(cycle(first + i) for i in range(count)))
    return failures


def start_fakes(children: Children, env: dict[str, str], tts_seconds: float) -> str:
    """bench/capacity/fakes.py with `tts_seconds` of audio per sentence; its base URL."""
    proc = children.start(
        [sys.executable, str(BENCH / "capacity" / "fakes.py"), "--tts-seconds", str(tts_seconds)],
        cwd=BENCH.parent,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the fakes process exited ({proc.wait()}) before listening")
    return f"http://127.0.0.1:{json.loads(line)['port']}/v1"


def rss_by_process(tree: ProcessTree) -> dict[int, float]:
    """MB resident per process of the server tree (the supervisor first)."""
    found: dict[int, float] = {}
    for pid in tree.pids():
        stat = _read_stat(pid)
        if stat is not None:
            found[pid] = int(stat[21]) * PAGE / 1e6
    return found


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares MB per 1,000 cycles."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return 0.0 if var == 0 else cov / var * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sample-every", type=int, default=250)
    parser.add_argument("--warmup", type=float, default=0.2, help="fraction of the cycles left out of the fit")
    parser.add_argument("--tts-seconds", type=float, default=0.5, help="audio per reply sentence (paced at real time)")
    parser.add_argument("--devices", type=int, default=DEVICES, help="distinct device ids, reused round-robin")
    parser.add_argument("--json", type=Path, help="write the samples and fits here")
    args = parser.parse_args(argv)
    globals()["DEVICES"] = args.devices

    children = Children()
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    with tempfile.TemporaryDirectory(prefix="vixio-soak-") as tmp:
        fakes_url = start_fakes(children, env, args.tts_seconds)
        server = VixioServerProcess(children, Path(tmp), fakes_url, env, workers=args.workers)
        settings = yaml.safe_load(server.config_path.read_text())
        settings["state"] = {"path": str(Path(tmp) / "state.db")}  # not the checkout's .vixio/
        server.config_path.write_text(yaml.safe_dump(settings))
        with server:
            server.wait_quiet(time.monotonic() + READY_TIMEOUT_S)
            pids = [server.tree.pid] + [pid for pid in server.tree.pids() if pid != server.tree.pid]
            names = {pid: ("supervisor" if pid == server.tree.pid else f"worker pid {pid}") for pid in pids}
            samples: list[dict[str, Any]] = []
            failures: list[str] = []
            started = time.monotonic()
            done = 0

            def sample() -> None:
                rss = rss_by_process(server.tree)
                samples.append(
                    {
                        "cycles": done,
                        "seconds": round(time.monotonic() - started, 1),
                        "rss_mb": {names.get(pid, f"pid {pid}"): round(mb, 1) for pid, mb in rss.items()},
                    }
                )
                row = samples[-1]
                print(
                    f"{row['cycles']:>6} cycles {row['seconds']:>7.1f} s  "
                    + "  ".join(f"{name} {mb:6.1f}" for name, mb in row["rss_mb"].items())
                    + f"  total {sum(row['rss_mb'].values()):6.1f} MB",
                    flush=True,
                )

            sample()
            while done < args.cycles:
                batch = min(args.sample_every, args.cycles - done)
                failures += asyncio.run(run_cycles(server.ws_url, done, batch, args.concurrency))
                done += batch
                time.sleep(1.0)  # the batch's sessions finish closing
                sample()
            problems = server.log_problems()
            warnings = [
                line.split(" | ")[-1]
                for line in server.log_path.read_text(errors="replace").splitlines()
                if "| WARNING |" in line or "| ERROR   |" in line
            ]
        children.kill_all()

    print(
        f"\n{args.cycles} cycles (typed turn + abrupt drop + no hello each) against --workers {args.workers} "
        f"in {samples[-1]['seconds']:.0f} s; {len(failures)} failed connections; server log: "
        f"{problems['warnings']} warnings, {problems['errors']} errors"
    )
    for failure in failures[:10]:
        print("  " + failure)
    for line in list(dict.fromkeys(warnings))[:10]:
        print("  log: " + line[:200])
    warm = [s for s in samples if s["cycles"] >= args.warmup * args.cycles]
    last = [s for s in samples if s["cycles"] >= 0.75 * args.cycles]
    fits: dict[str, dict[str, float]] = {}
    for name in list(samples[-1]["rss_mb"]) + ["total"]:

        def series(rows: list[dict[str, Any]], name: str = name) -> list[tuple[int, float]]:
            return [
                (row["cycles"], sum(row["rss_mb"].values()) if name == "total" else row["rss_mb"].get(name, 0.0))
                for row in rows
                if name == "total" or name in row["rss_mb"]
            ]

        fits[name] = {
            "after_warmup": round(slope_per_1000(series(warm)), 2),
            "last_quarter": round(slope_per_1000(series(last)), 2),
            "start_mb": series(samples)[0][1],
            "end_mb": series(samples)[-1][1],
        }
        fit = fits[name]
        print(
            f"{name:>18}: {fit['start_mb']:6.1f} -> {fit['end_mb']:6.1f} MB; growth per 1,000 cycles "
            f"after warm-up {fit['after_warmup']:+.2f} MB, in the last quarter {fit['last_quarter']:+.2f} MB"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "samples": samples,
                    "fits": fits,
                    "failures": failures,
                    "log": problems,
                    "log_lines": warnings[:100],
                },
                indent=1,
            )
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
