"""bench/bench_ab.py: the figures it reads from bench_capacity's JSON and how it pairs runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_ab  # noqa: E402
from bench_ab import loads_by_key, main, paired_report  # noqa: E402

pytestmark = pytest.mark.unit


def summary(n: int, cpu: float, p95: float, shape: str = "staggered", late: int = 0) -> dict[str, object]:
    """The parts of a bench_capacity summary bench_ab reads (the real one has many more)."""
    return {
        "n": n,
        "shape": shape,
        "memory": "on",
        "server": {"cpu_ms_per_session_frame": cpu},
        "latency_ms": {"p50": p95 - 10, "p95": p95},
        "downlink": {"late": late, "frames": 7500},
    }


def test_runs_are_paired_per_load_and_the_mean_difference_says_whether_every_pair_agrees() -> None:
    base = [
        loads_by_key([summary(100, 0.50, 270), summary(200, 0.45, 900, late=3)]),
        loads_by_key([summary(100, 0.54, 280), summary(200, 0.44, 800)]),
    ]
    head = [
        loads_by_key([summary(100, 0.48, 268), summary(200, 0.46, 850)]),
        loads_by_key([summary(100, 0.52, 281), summary(200, 0.43, 820)]),
    ]
    lines = paired_report(base, head)
    assert (
        lines[0]
        == "staggered, memory on, zero providers, N=100 (2 pair(s), base first in odd pairs, this checkout first in even ones):"
    )
    assert lines[1] == (
        "  ms CPU per session per frame: base 0.500 / 0.540, this 0.480 / 0.520; "
        "difference mean -0.020 (-3.8 %), every pair lower"
    )
    assert lines[2] == "  ms p95: base 270.0 / 280.0, this 268.0 / 281.0; difference mean -0.5 (-0.2 %), pairs disagree"
    assert lines[3] == "  late frames: base 0.0 / 0.0, this 0.0 / 0.0; difference mean +0.0, no pair changed"
    assert lines[5] == (
        "  ms CPU per session per frame: base 0.450 / 0.440, this 0.460 / 0.430; "
        "difference mean +0.000 (+0.0 %), pairs disagree"
    )
    assert lines[7] == "  late frames: base 3.0 / 0.0, this 0.0 / 0.0; difference mean -1.5 (-100.0 %), pairs disagree"


def test_cpu_over_the_floor_during_the_load_is_compared_where_both_sides_measure_it() -> None:
    def probed(cpu: float, floor: float) -> dict[str, object]:
        result = summary(100, cpu, 270)
        result["server"]["cpu_per_frame_vs_floor_during"] = cpu / floor  # type: ignore[index]
        return result

    both = paired_report([loads_by_key([probed(0.60, 0.30)])], [loads_by_key([probed(0.44, 0.20)])])
    assert both[2] == (
        "  CPU per frame ÷ the floor during the load: base 2.00, this 2.20; "
        "difference mean +0.20 (+10.0 %), every pair higher"
    )
    one_side = paired_report([loads_by_key([summary(100, 0.60, 270)])], [loads_by_key([probed(0.44, 0.20)])])
    assert not any("floor" in line for line in one_side) and len(one_side) == 4


def test_a_load_missing_from_one_side_is_left_out_and_json_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert paired_report([loads_by_key([summary(1, 1.7, 260)])], [loads_by_key([summary(100, 0.5, 270)])]) == []
    with pytest.raises(SystemExit):
        main(["--base", ".", "--", "--n", "1", "--json", "x.json"])
    assert "--json is set by bench_ab.py" in capsys.readouterr().err


def test_the_side_that_runs_first_alternates_from_pair_to_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever a run leaves behind (or the host's drift within a pair) must not always land on one side."""
    order: list[str] = []

    def run(checkout: Path, bench_args: list[str], out: Path) -> dict[object, dict[str, float]]:
        side = "base" if checkout == tmp_path else "head"
        order.append(side)
        return loads_by_key([summary(100, 0.5 if side == "base" else 0.4, 270)])

    monkeypatch.setattr(bench_ab, "run_capacity", run)
    assert main(["--base", str(tmp_path), "--pairs", "3", "--", "--n", "100"]) == 0
    assert order == ["base", "head", "head", "base", "base", "head"]
    assert "this 0.400 / 0.400 / 0.400" in capsys.readouterr().out  # each side's runs stay on its side
