"""bench/bench_idle.py must keep working: a tiny run end to end (fakes, `vixio serve --workers 1`,
the idle clients' process, the talking device), and the config overrides the benchmarks use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from bench_idle import slope_per_1000  # noqa: E402
from capacity.server import server_config  # noqa: E402

pytestmark = pytest.mark.process


def test_overrides_merge_key_by_key(tmp_path: Path) -> None:
    config = server_config(
        1,
        2,
        "http://127.0.0.1:3/v1",
        "INFO",
        tmp_path / "state.db",
        overrides={
            "state": {"backend": "redis", "url": "redis://127.0.0.1:1/0"},
            "xiaozhi": {"max_connections": 20000},
        },
    )
    assert config["state"] == {"path": str(tmp_path / "state.db"), "backend": "redis", "url": "redis://127.0.0.1:1/0"}
    assert config["xiaozhi"]["max_connections"] == 20000 and config["xiaozhi"]["port"] == 1
    assert config["xiaozhi"]["mcp"]["limits"]["tools_per_source"] == 1000


def test_the_memory_slope_is_a_least_squares_fit() -> None:
    assert slope_per_1000([(0, 100), (1000, 300), (2000, 500)]) == 200
    assert slope_per_1000([(0, 100), (1000, 310), (2000, 490)]) == 195
    assert slope_per_1000([(0, 100)]) == 0


def test_twenty_idle_devices_and_one_talking_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_idle.py"),
            "--devices",
            "20",
            "--step",
            "10",
            "--turns",
            "1",
            "--idle-seconds",
            "1",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [s["connected"] for s in report["steps"]] == [10, 20]
    assert all(s["failed"] == 0 and not s["unexpected"] for s in report["steps"])  # silent: no audio, no tts
    assert report["steps"][-1]["rss_mb"] > report["rss_start_mb"] > 50
    assert report["talk_alone"]["turns"]["failed"] == report["talk_among_idle"]["turns"]["failed"] == 0
    assert 0 < report["talk_among_idle"]["latency_ms"]["p95"] < 15000
    assert report["idle_all"]["cpu_pct_of_core"] >= 0 and report["floor"]["ms_per_frame"] > 0
    assert "one worker holds" in run.stdout
