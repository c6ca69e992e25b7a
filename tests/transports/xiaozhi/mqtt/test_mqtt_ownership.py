"""Which process serves a device on a shared broker (vixio/transports/xiaozhi/mqtt/ownership.py),
two processes' gates on one real SQLite store: of both offered the same hello exactly one
handles it; the device's messages that came while the claim was decided are handled after it,
in order, by the winner only; a message that is not a hello claims nothing; a device that left
the broker is free for the other at its next hello."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from vixio.state.sqlite import SqliteStore
from vixio.transports.xiaozhi.mqtt.ownership import DeviceOwnership

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:00:47:30"


async def test_one_of_two_processes_serves_a_device_and_in_order(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    handled: dict[str, list[str]] = {"east": [], "west": []}
    gates = {name: DeviceOwnership(store.claim, store.release, name, lambda: []) for name in handled}
    try:

        def offer(message: str, hello: bool = False) -> None:
            for name, gate in gates.items():
                gate.offer(DEVICE, hello, lambda name=name: handled[name].append(message))

        offer("listen before any hello")  # claims nothing: nobody serves it
        offer("hello", hello=True)
        offer("listen start")  # while the claim is decided: waits for it
        offer("listen stop")

        async def decided() -> None:
            while not any(gate.holds(DEVICE) for gate in gates.values()) or any(g._waiting for g in gates.values()):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(decided(), 10)
        [winner] = [name for name, gate in gates.items() if gate.holds(DEVICE)]
        [loser] = [name for name in gates if name != winner]
        offer("abort")
        assert handled[winner] == ["hello", "listen start", "listen stop", "abort"]
        assert handled[loser] == [] and gates[loser].elsewhere == 5  # the first listen too
        assert await store.claim("mqtt:" + DEVICE, loser, ttl=30) == winner
        # The device left the broker: its claim is given up and its next hello may go to the other.
        gates[winner].gone(DEVICE)
        await asyncio.sleep(0.2)
        gates[loser].offer(DEVICE, True, lambda: handled[loser].append("hello again"))
        await asyncio.wait_for(_until(lambda: gates[loser].holds(DEVICE)), 10)
        assert handled[loser] == ["hello again"]
    finally:
        for gate in gates.values():
            await gate.stop()
        await store.close()


async def _until(condition) -> None:  # type: ignore[no-untyped-def]
    while not condition():
        await asyncio.sleep(0.01)
