"""A flood of invented device ids must not take a waiting device's activation code away, nor
write a log line per id."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from loguru import logger

from vixio.config.xiaozhi import ActivationConfig
from vixio.state.sqlite import SqliteStore
from vixio.transports.xiaozhi.http import activation
from vixio.transports.xiaozhi.http.activation import MAX_PENDING_ACTIVATIONS, ActivationRegistry

from .test_ota import DEVICE, HEADERS, SYSTEM_INFO, StartServer, http, start_server, store  # noqa: F401

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_ten_thousand_ids_from_many_addresses_leave_a_waiting_devices_code(store: SqliteStore) -> None:
    from vixio.transports.xiaozhi.http.activation_proof import ActivationRefused

    clock = Clock()
    registry = ActivationRegistry(ActivationConfig(enabled=True), store, clock=clock)
    code = registry.pending(DEVICE, "192.168.1.23").code
    refused = 0
    for i in range(10_000):
        clock.now += 0.01  # 100 s for the flood: shorter than activation.STALE_AFTER
        if i % 300 == 0:
            assert registry.pending(DEVICE, "192.168.1.23").code == code  # the device polls every 3 s
        try:
            registry.pending(f"flood-{i}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
        except ActivationRefused as exc:
            assert exc.status == 503 and exc.kind == "full"
            refused += 1
    assert refused == 10_000 - (MAX_PENDING_ACTIVATIONS - 1)
    assert await registry.confirm(code) == DEVICE
    assert [(a.device_id, a.via) for a in await store.admissions()] == [(DEVICE, "activation")]


async def test_codes_of_devices_that_stopped_asking_make_room(store: SqliteStore) -> None:
    clock = Clock()
    registry = ActivationRegistry(ActivationConfig(enabled=True), store, clock=clock)
    gone = registry.pending("gone", "10.0.0.1").code
    code = registry.pending(DEVICE, "192.168.1.23").code
    for i in range(MAX_PENDING_ACTIVATIONS - 2):
        registry.pending(f"flood-{i}", f"10.1.{i // 256}.{i % 256}")
    clock.now += activation.STALE_AFTER - 10
    registry.pending(DEVICE, "192.168.1.23")  # still waiting: seen again
    clock.now += 20  # "gone" and the flood last asked activation.STALE_AFTER + 10 s ago
    registry.pending("new-device", "192.168.1.40")
    assert await registry.confirm(gone) is None  # made room
    assert await registry.confirm(code) == DEVICE


async def test_one_address_creates_a_bounded_number_of_codes_a_minute(store: SqliteStore) -> None:
    from vixio.transports.xiaozhi.http.activation_proof import ActivationRefused

    clock = Clock()
    registry = ActivationRegistry(ActivationConfig(enabled=True, new_codes_per_minute=5), store, clock=clock)
    for i in range(5):
        registry.pending(f"a-{i}", "203.0.113.7")
    with pytest.raises(ActivationRefused, match="new_codes_per_minute") as info:
        registry.pending("a-5", "203.0.113.7")
    assert info.value.status == 429
    registry.pending("a-0", "203.0.113.7")  # a device that has its code keeps being answered
    registry.pending("b-0", "203.0.113.8")  # another address is not affected
    clock.now += 60
    registry.pending("a-5", "203.0.113.7")  # the next minute
    unlimited = ActivationRegistry(ActivationConfig(enabled=True, new_codes_per_minute=0), store, clock=clock)
    for i in range(100):
        unlimited.pending(f"p-{i}", "10.9.9.9")  # behind a proxy: every client has its address


async def test_an_http_flood_from_one_address(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore
) -> None:
    server = await start_server(activation={"enabled": True})
    lines: list[str] = []
    sink = logger.add(
        lambda m: lines.append(m.record["message"]), level="INFO", filter="vixio.transports.xiaozhi.http.ota"
    )
    try:
        async with http.post(server.url, headers=HEADERS, data=json.dumps(SYSTEM_INFO)) as response:
            code = (await response.json())["activation"]["code"]
        statuses: dict[int, int] = {}

        async def offer(ids: range) -> None:
            for i in ids:
                headers = {**HEADERS, "Device-Id": f"02:00:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"}
                async with http.post(server.url, headers=headers, data="{}") as response:
                    statuses[response.status] = statuses.get(response.status, 0) + 1

        started = time.monotonic()
        await asyncio.gather(*(offer(range(n, 10_000, 16)) for n in range(16)))
        seconds = time.monotonic() - started
    finally:
        logger.remove(sink)
    async with http.post(server.url + "activate/confirm", json={"code": code}) as response:
        assert response.status == 200 and (await response.json())["device_id"] == DEVICE
    assert statuses == {200: 29, 429: 9971}, statuses  # 30 a minute from one address, the device's included
    shown = [line for line in lines if "shows code" in line]
    windows = seconds // 10 + 1  # each 10 s: 20 codes, 5 refusals and a count of each at most
    assert len(shown) <= 20 * windows and len(lines) <= 27 * windows, (len(lines), lines[-5:])
    print(f"10,000 OTA requests in {seconds:.1f} s; {len(lines)} activation log lines")


def test_a_flood_of_offers_is_logged_as_a_few_lines_and_counts() -> None:
    from vixio.transports.xiaozhi.http.ota import LineBudget

    clock = Clock()
    budget = LineBudget(20, 10.0, clock=clock)
    full = counted = summaries = 0
    for _ in range(10_000):  # 100 s of offers
        clock.now += 0.01
        shown, unshown = budget.hit()
        full += shown
        counted += unshown
        summaries += unshown > 0
    clock.now += 10
    shown, unshown = budget.hit()  # the next offer after the flood reports what was left
    full, counted, summaries = full + shown, counted + unshown, summaries + (unshown > 0)
    assert full + counted == 10_001
    assert full <= 20 * 11 and summaries <= 11
