"""Summing the workers' series (vixio/metrics/merge.py) and counting store failures in every backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from vixio.metrics.instruments import STORE_ERRORS
from vixio.metrics.merge import Family, FleetSamples, local_families, render, worker_families
from vixio.state import StoreError
from vixio.state.sqlite import SqliteStore

pytestmark = pytest.mark.unit


def worker(turns: float, sessions: float, latencies: list[float]) -> list[Family]:
    """A worker's families as it would send them (through their JSON form)."""
    registry = CollectorRegistry()
    Counter("vixio_turns", "turns", ["outcome"], registry=registry).labels("answered").inc(turns)
    Gauge("vixio_sessions", "sessions", registry=registry).set(sessions)
    histogram = Histogram("vixio_turn_latency_seconds", "latency", buckets=(0.5, 1.0), registry=registry)
    for seconds in latencies:
        histogram.observe(seconds)
    return [Family.from_json(family.to_json()) for family in local_families(registry)]


def parsed(families: list[Family]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = render(families).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counters_and_buckets_sum_and_a_replaced_worker_keeps_its_counts() -> None:
    fleet = FleetSamples()
    fleet.update(0, 100, worker(3, 2, [0.4, 0.9]))
    fleet.update(1, 101, worker(5, 1, [2.0]))
    both = parsed(fleet.families([0, 1], [], worker_families(ready=2, restarted=0)))
    assert both[("vixio_turns_total", (("outcome", "answered"),))] == 8
    assert both[("vixio_sessions", ())] == 3
    assert both[("vixio_turn_latency_seconds_bucket", (("le", "0.5"),))] == 1
    assert both[("vixio_turn_latency_seconds_bucket", (("le", "1.0"),))] == 2
    assert both[("vixio_turn_latency_seconds_bucket", (("le", "+Inf"),))] == 3
    assert both[("vixio_turn_latency_seconds_sum", ())] == pytest.approx(3.3)
    # w0 is down: its counters stay at their last value, its gauge (sessions) is gone.
    down = parsed(fleet.families([1], [], worker_families(ready=1, restarted=0)))
    assert down[("vixio_turns_total", (("outcome", "answered"),))] == 8 and down[("vixio_sessions", ())] == 1
    # w0 came back as a new process that has counted 1 turn: 3 (the old one's) + 1 + 5.
    fleet.update(0, 102, worker(1, 1, []))
    back = parsed(fleet.families([0, 1], [], worker_families(ready=2, restarted=1)))
    assert back[("vixio_turns_total", (("outcome", "answered"),))] == 9
    assert back[("vixio_turn_latency_seconds_count", ())] == 3
    assert back[("vixio_sessions", ())] == 2 and back[("vixio_workers_restarted_total", ())] == 1
    # The same process answering again replaces its numbers (nothing is counted twice).
    fleet.update(0, 102, worker(2, 1, []))
    again = parsed(fleet.families([0, 1], [], []))
    assert again[("vixio_turns_total", (("outcome", "answered"),))] == 10


async def test_every_store_backend_counts_its_failures_once(tmp_path: Path) -> None:
    unavailable = STORE_ERRORS.labels("unavailable")
    before = unavailable._value.get()
    store = SqliteStore(tmp_path / "state.db")
    with pytest.raises(StoreError):
        await store.admission("02:00:00:00:00:01")  # not open
    assert unavailable._value.get() == before + 1
    await store.open()
    assert await store.admission("02:00:00:00:00:01") is None
    await store.close()
    assert unavailable._value.get() == before + 1
