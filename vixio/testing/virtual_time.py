"""A virtual clock for timing tests: an event loop whose `time()` jumps to the next timer whenever
nothing is ready, so an outage of seconds, a retry pause or a first-audio timeout costs no wall
time and does not stretch when the machine is busy (a sleeping test asserting "within 0.8 s"
fails under load; the same test on this loop cannot, and still fails when the code waits twice).

    @virtual_time
    async def test_one_wait_not_three() -> None:
        loop = asyncio.get_running_loop()
        circuit = TTSCircuit(primary, fallback, first_audio_timeout=0.3, clock=loop.time)
        started = loop.time()
        ...
        assert loop.time() - started == pytest.approx(0.3)

Only code that reads time through the loop (asyncio.sleep, asyncio.timeout, call_later,
`loop.time`) or through a clock it is handed is virtual. Sockets and pipes stay real: the loop
polls them without blocking before it advances the clock, and blocks on them for real only when
no timer is pending. Work in threads is not waited for (the clock jumps past it), so a test on
this loop keeps threads out or joins them itself.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls the real file descriptors; where the loop would block until a timer, moves the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: only I/O (or another thread) can wake the loop
            return super().select(None)
        self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time, starting at 0.0."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to its end on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def virtual_time(test: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """Make an async test a plain one that runs on its own virtual-time loop (pytest's fixtures
    still reach it by name)."""

    @functools.wraps(test)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run(test(*args, **kwargs))

    return wrapper
