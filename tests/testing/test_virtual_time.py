"""The virtual-time loop timing tests run on: timers cost no wall time and fire in order at their
exact virtual moment; real I/O is still served while a timer is pending."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from vixio.testing.virtual_time import run, virtual_time

pytestmark = pytest.mark.unit


@virtual_time
async def test_an_hour_of_sleep_takes_no_wall_time() -> None:
    loop = asyncio.get_running_loop()
    wall = time.monotonic()
    await asyncio.sleep(3600)
    assert loop.time() == pytest.approx(3600) and time.monotonic() - wall < 1


@virtual_time
async def test_timers_fire_in_order_at_their_moment() -> None:
    loop = asyncio.get_running_loop()
    fired: list[tuple[str, float]] = []
    for name, delay in (("c", 3.0), ("a", 1.0), ("b", 2.0)):
        loop.call_later(delay, lambda n=name: fired.append((n, loop.time())))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(2.5):
            await asyncio.Event().wait()
    assert loop.time() == pytest.approx(2.5)
    await asyncio.sleep(1)
    assert fired == [("a", pytest.approx(1.0)), ("b", pytest.approx(2.0)), ("c", pytest.approx(3.0))]


def test_a_socket_is_read_while_a_timer_waits() -> None:
    async def exchange() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        left.setblocking(False)
        right.setblocking(False)
        try:
            loop.call_later(0.5, right.send, b"ping")  # written at virtual 0.5 s, read when it lands
            data = await asyncio.wait_for(loop.sock_recv(left, 4), timeout=10)
            return data, loop.time()
        finally:
            left.close()
            right.close()

    data, at = run(exchange())
    assert data == b"ping" and at == pytest.approx(0.5)
