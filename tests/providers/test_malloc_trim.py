"""malloc_trim after synthesis: on the inference pool, at most once per interval."""

from __future__ import annotations

import time

import pytest

from vixio.providers import malloc_trim
from vixio.providers.inference import inference_executor

pytestmark = pytest.mark.unit


def settle() -> None:
    inference_executor().submit(lambda: None).result(10)  # the queued trim has run
    deadline = time.monotonic() + 5
    while malloc_trim._pending and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.skipif(malloc_trim._malloc_trim is None, reason="glibc only")
def test_trims_at_most_once_per_interval_and_the_last_request_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc_trim, "_last", float("-inf"))
    monkeypatch.setattr(malloc_trim, "MIN_INTERVAL", 0.5)
    start = malloc_trim.trims
    for _ in range(5):
        malloc_trim.trim_soon()
    settle()
    assert malloc_trim.trims == start + 1
    malloc_trim.trim_soon()  # within the interval: waits for its end
    malloc_trim.trim_soon()
    time.sleep(0.2)
    assert malloc_trim.trims == start + 1
    time.sleep(0.6)
    settle()
    assert malloc_trim.trims == start + 2
