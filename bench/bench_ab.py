"""Two checkouts compared by bench/bench_capacity.py in alternating runs: is a change measurable?

    .venv/bin/python bench/bench_ab.py --base main --pairs 3 -- --n 100 --shape staggered

On a 2-core VM, CPU per session per frame at 100 devices moves ±5 % from one run of the same code
to the next (the host, and how full the event loops' batches happen to be), so one run before
and one after cannot show a change of a few percent. This runs the benchmark `--pairs` times for
each side, alternating, and the side that runs first alternates too (base then this checkout,
this checkout then base, ...): the host's drift lands on both, and so does whatever the run
before leaves behind. (With the base always first, the second run had the higher p95 at N=200 in
all 5 pairs of one session, 2 of them a commit against itself: +33 %, CPU within 1 %.) It
prints per load (shape, N): every run's CPU ms per session per frame and p95, and the paired
differences (this − base) with their mean. A change is worth believing when every pair moves the
same way. The host's own speed changes within minutes (and within a load: bench/capacity/floor.py),
so where both sides' bench_capacity probe the floor during the load, CPU per frame divided by that
floor is compared too.

`--base` is a directory holding another checkout, or a git ref of this repository (checked out
in a temporary worktree, removed afterwards). Everything after `--` goes to bench_capacity.py
(not `--json`, which this sets). Run nothing else meanwhile: it is a benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

Key = tuple[str, str, str, int]
"""(shape, memory, provider pair, N): one load of bench_capacity."""


def loads_by_key(summaries: Sequence[dict[str, Any]]) -> dict[Key, dict[str, float]]:
    """The figures compared, per load, from one bench_capacity `--json` file's summaries."""
    figures: dict[Key, dict[str, float]] = {}
    for summary in summaries:
        key = (
            str(summary.get("shape", "staggered")),
            str(summary.get("memory", "on")),
            str(summary.get("providers", "zero")),
            int(summary["n"]),
        )
        figures[key] = {
            "cpu": float(summary["server"]["cpu_ms_per_session_frame"]),
            "p95": float(summary["latency_ms"]["p95"]),
            "late": float(summary["downlink"]["late"]),
        }
        versus = summary["server"].get("cpu_per_frame_vs_floor_during")
        if versus is not None:  # bench_capacity from 62691a0 on: the host's state during the load divided out
            figures[key]["cpu_vs_floor"] = float(versus)
    return figures


def paired_report(
    base_runs: Sequence[dict[Key, dict[str, float]]], head_runs: Sequence[dict[Key, dict[str, float]]]
) -> list[str]:
    """Lines comparing each load's runs pair by pair (pair i = base run i, then head run i)."""
    lines = []
    keys = sorted({key for run in [*base_runs, *head_runs] for key in run})
    for key in keys:
        pairs = [(b[key], h[key]) for b, h in zip(base_runs, head_runs, strict=False) if key in b and key in h]
        if not pairs:
            continue
        shape, memory, providers, n = key
        lines.append(
            f"{shape}, memory {memory}, {providers} providers, N={n} ({len(pairs)} pair(s), base first in odd pairs, this checkout first in even ones):"
        )
        for figure, unit, digits in (
            ("cpu", "ms CPU per session per frame", 3),
            ("cpu_vs_floor", "CPU per frame ÷ the floor during the load", 2),
            ("p95", "ms p95", 1),
            ("late", "late frames", 1),
        ):
            if not all(figure in b and figure in h for b, h in pairs):
                continue  # a side whose bench_capacity does not measure it
            base = [b[figure] for b, _ in pairs]
            head = [h[figure] for _, h in pairs]
            diffs = [h - b for b, h in zip(base, head, strict=True)]
            mean_base = statistics.mean(base)
            percent = f" ({100 * statistics.mean(diffs) / mean_base:+.1f} %)" if mean_base else ""
            agree = (
                "no pair changed"
                if not any(diffs)
                else "every pair lower"
                if all(d < 0 for d in diffs)
                else "every pair higher"
                if all(d > 0 for d in diffs)
                else "pairs disagree"
            )
            lines.append(
                f"  {unit}: base {' / '.join(f'{v:.{digits}f}' for v in base)}, this "
                f"{' / '.join(f'{v:.{digits}f}' for v in head)}; difference mean "
                f"{statistics.mean(diffs):+.{digits}f}{percent}, {agree}"
            )
    return lines


def run_capacity(checkout: Path, bench_args: Sequence[str], out: Path) -> dict[Key, dict[str, float]]:
    """One bench_capacity run of `checkout` (its own bench and its own vixio), summaries by load."""
    command = [sys.executable, str(checkout / "bench" / "bench_capacity.py"), *bench_args, "--json", str(out)]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench_capacity in {checkout} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return loads_by_key(json.loads(out.read_text()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="a checkout's directory, or a git ref of this repository")
    parser.add_argument("--pairs", type=int, default=3, help="runs per side, alternating")
    parser.add_argument("bench_args", nargs="*", help="after --: bench_capacity.py's arguments")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if "--json" in args.bench_args:
        parser.error("--json is set by bench_ab.py")
    with tempfile.TemporaryDirectory(prefix="vixio-ab-") as folder:
        work = Path(folder)
        base = Path(args.base)
        worktree = None
        if not base.is_dir():
            worktree = work / "base"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.base],
                check=True,
                capture_output=True,
            )
            base = worktree
        try:
            base_runs, head_runs = [], []
            for pair in range(args.pairs):
                for side in ("base", "head") if pair % 2 == 0 else ("head", "base"):
                    checkout, runs = (base, base_runs) if side == "base" else (ROOT, head_runs)
                    runs.append(run_capacity(checkout, args.bench_args, work / f"{side}-{pair}.json"))
                print(f"pair {pair + 1} of {args.pairs} done", file=sys.stderr, flush=True)
        finally:
            if worktree is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True
                )
    print(f"base: {args.base}; this checkout: {ROOT}")
    for line in paired_report(base_runs, head_runs):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
