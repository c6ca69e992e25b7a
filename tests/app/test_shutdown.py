"""`vixio.app.shutdown.step`: every step of a stop ends, and a step that does not is named."""

from __future__ import annotations

import asyncio
import time

import pytest
from loguru import logger

from vixio.app import shutdown

pytestmark = pytest.mark.unit


@pytest.fixture
def lines() -> list[str]:
    seen: list[str] = []
    handler = logger.add(lambda message: seen.append(str(message)), level="INFO", format="{level} {message}")
    yield seen
    logger.remove(handler)


async def test_a_step_that_never_ends_is_abandoned_named_and_the_next_one_runs(
    lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutdown, "SLOW_AFTER", 0.1)
    ran: list[str] = []

    async def stuck() -> None:
        ran.append("stuck")
        await asyncio.Event().wait()

    async def next_step() -> None:
        ran.append("next")

    started = time.monotonic()
    assert await shutdown.step("the stuck store", stuck(), limit=0.3) is False
    assert time.monotonic() - started < 1.0
    assert await shutdown.step("the next step", next_step()) is True
    assert ran == ["stuck", "next"]
    assert any("INFO shutdown: still waiting for the stuck store" in line for line in lines)
    assert any("WARNING shutdown: the stuck store did not finish within 0.3 s" in line for line in lines)


async def test_a_step_that_ignores_its_cancellation_is_left_behind(lines: list[str]) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await release.wait()  # a library that swallows the cancellation

    started = time.monotonic()
    assert await shutdown.step("the stubborn client", stubborn(), limit=0.2) is False
    assert time.monotonic() - started < 2.0  # 0.2 s, then 1 s for the cancellation to be honoured
    assert any("the stubborn client did not finish" in line for line in lines)
    release.set()


async def test_a_step_that_fails_is_logged_with_its_traceback_and_does_not_stop_the_others(lines: list[str]) -> None:
    async def broken() -> None:
        raise RuntimeError("the socket is gone")

    assert await shutdown.step("the broken bus", broken()) is False
    assert any("ERROR shutdown: the broken bus failed; going on" in line for line in lines)
    assert await shutdown.step("a quick one", asyncio.sleep(0)) is True


async def test_cancelling_the_shutdown_cancels_the_step_under_way() -> None:
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    stopping = asyncio.create_task(shutdown.step("a slow step", slow()))
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.wait_for(cancelled.wait(), 1)
