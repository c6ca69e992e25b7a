"""RealTimeBudget: real time plus a bounded burst, refilled by the clock."""

from __future__ import annotations

import pytest

from vixio.core.realtime_budget import RealTimeBudget

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_allowed_then_only_real_time() -> None:
    clock = Clock()
    budget = RealTimeBudget(1.0, clock=clock)
    assert [budget.take(0.06) for _ in range(17)] == [True] * 16 + [False]
    assert budget.refused == 1
    clock.now += 0.06
    assert budget.take(0.06) and not budget.take(0.06)
    clock.now += 60.0  # a long pause refills the burst, never more
    assert sum(budget.take(0.06) for _ in range(40)) == 16


def test_a_peer_at_real_time_is_never_refused() -> None:
    clock = Clock()
    budget = RealTimeBudget(0.5, clock=clock)
    for _ in range(10_000):
        assert budget.take(0.06)
        clock.now += 0.06


def test_burst_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RealTimeBudget(0)
