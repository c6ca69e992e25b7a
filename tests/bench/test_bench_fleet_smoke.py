"""bench/bench_fleet.py must keep working: two devices, one turn, on both configurations (HAProxy
in front of two instances, and one instance with two workers) on a real redis-server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vixio.testing import redis_server
from vixio.testing.fleet import MISSING, haproxy_path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from capacity.fleet import RedisCounters, RedisSample  # noqa: E402

pytestmark = pytest.mark.process


def test_a_redis_delta_leaves_out_the_info_that_took_it() -> None:
    before = RedisSample(commands=10, reads=5, cpu_s=1.0, by_command={"evalsha": 3, "hget": 1})
    after = RedisSample(commands=21, reads=9, cpu_s=1.5, by_command={"evalsha": 8, "hget": 1, "zadd": 4})
    delta = RedisCounters.delta(before, after)
    assert (delta.commands, delta.reads, delta.cpu_s) == (10, 3, 0.5)
    assert delta.by_command == {"evalsha": 5, "zadd": 4}


def test_two_devices_on_both_configurations_end_to_end(tmp_path: Path) -> None:
    if redis_server.missing():
        pytest.skip(redis_server.missing())
    if haproxy_path() is None:
        pytest.skip(MISSING)
    out = tmp_path / "fleet.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_fleet.py"),
            "--n",
            "2",
            "--turns",
            "1",
            "--stagger",
            "0.5",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summaries = {s["configuration"]: s for s in json.loads(out.read_text())}
    assert set(summaries) == {"fleet", "single"}
    for s in summaries.values():
        assert s["turns"]["failed"] == 0 and s["latency_ms"]["count"] == 2
        assert s["session_start"]["devices"] == 2 and s["session_start"]["hello_ms"]["p95"] > 0
        assert s["redis"]["load"]["commands"] > 0  # the turns were stored in the shared redis-server
        assert s["server"]["cpu_ms_per_session_frame"] > 0 and s["floor"]["ms_per_frame"] > 0
        # Net of the idle traffic (heartbeats, the bus's member refresh) of the very seconds each
        # was counted in: a turn writes at least once, a session start reads its history.
        assert s["redis"]["per_turn"]["round_trips"] > 0, s["redis"]
        assert s["session_start"]["redis_per_start"]["round_trips"] > 0, s["session_start"]
    assert summaries["fleet"]["haproxy_cpu_s"] >= 0
    assert "fleet ÷ single" in run.stdout
