"""How a contact's identity is resolved (vixio/transports/xiaozhi/session/identity.py), on a real SQLite
store: the pinned pair as it came, a claimant under its own id (also when someone pinned that id
first), an invented id never pinned, no Client-Id pinned as "", an unreachable store serving
everyone under ids of their own, and one log line per claimed device however often it is claimed."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from loguru import logger

from vixio.state.sqlite import SqliteStore
from vixio.transports.xiaozhi.session.auth import DeviceIdentity, anonymous_identity
from vixio.transports.xiaozhi.session.identity import IdentityPins, IdentityRefused, claimant_device_id

pytestmark = pytest.mark.unit

MAC = "aa:bb:cc:dd:ee:ff"


@pytest.fixture
async def pins(tmp_path: Path) -> AsyncIterator[IdentityPins]:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    yield IdentityPins(store)
    await store.close()


def test_a_claimants_id_is_short_printable_and_its_own() -> None:
    long_id = "x" * 128
    for claimed in (MAC, long_id):
        derived = claimant_device_id(claimed, "att-client")
        assert len(derived) <= 63 and re.fullmatch(r"[0-9A-Za-z:._~-]+", derived)
        assert derived.startswith(claimed[:52] + "~")
    assert claimant_device_id(MAC, "a") != claimant_device_id(MAC, "b")
    assert claimant_device_id(MAC, "a") == claimant_device_id(MAC, "a")


async def test_the_pinned_pair_is_served_as_it_came_and_a_claimant_under_its_own_id(pins: IdentityPins) -> None:
    device = DeviceIdentity(MAC, "board")
    assert await pins.resolve(device) == device  # first contact: pinned
    assert await pins.resolve(device) == device
    claimant = await pins.resolve(DeviceIdentity(MAC, "att-client"))
    assert (claimant.device_id, claimant.claimed) == (claimant_device_id(MAC, "att-client"), MAC)
    assert [r.client_id for r in await pins.store.rebind_requests(MAC)] == ["att-client"]
    assert await pins.pinned_client(MAC) == "board" and await pins.pinned_client("02:00:00:00:00:01") is None


async def test_a_claimants_own_id_pinned_first_by_someone_else_gives_it_another(pins: IdentityPins) -> None:
    await pins.resolve(DeviceIdentity(MAC, "board"))
    first = claimant_device_id(MAC, "reflashed")
    await pins.resolve(DeviceIdentity(first, "squatter"))  # claimed directly, before the claimant came
    resolved = await pins.resolve(DeviceIdentity(MAC, "reflashed"))
    assert resolved.device_id == claimant_device_id(first, "reflashed") and resolved.claimed == MAC
    # Only the claim of the real id waits for an operator, not the claim of a claimant's id.
    assert [(r.device_id, r.client_id) for r in await pins.store.rebind_requests()] == [(MAC, "reflashed")]
    level = MAC
    for _ in range(4):  # every id down another claimant's line squatted: refused, not looped
        level = claimant_device_id(level, "other-board")
        await pins.resolve(DeviceIdentity(level, "squatter"))
    with pytest.raises(IdentityRefused):
        await pins.resolve(DeviceIdentity(MAC, "other-board"))


async def test_invented_ids_are_not_pinned_and_no_client_id_pins_empty(pins: IdentityPins) -> None:
    anonymous = anonymous_identity({}, {})
    assert anonymous.invented and await pins.resolve(anonymous) == anonymous
    assert await pins.store.identity_pin(anonymous.device_id) is None
    claimed = anonymous_identity({"Device-Id": MAC}, {})
    assert not claimed.invented and await pins.resolve(claimed) == claimed
    assert await pins.pinned_client(MAC) == ""  # no proof offered: any later contact without one is it
    assert await pins.resolve(DeviceIdentity(MAC, "")) == DeviceIdentity(MAC, "")
    assert (await pins.resolve(DeviceIdentity(MAC, "board"))).claimed == MAC


async def test_an_unreachable_store_serves_everyone_under_ids_of_their_own(pins: IdentityPins) -> None:
    device = DeviceIdentity(MAC, "board")
    assert await pins.resolve(device) == device
    await pins.store.close()
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    try:
        for _ in range(5):
            resolved = await pins.resolve(device)
            assert resolved.device_id == claimant_device_id(MAC, "board") and resolved.claimed == MAC
    finally:
        logger.remove(sink)
    assert len(lines) == 1 and "identity pins cannot be read" in lines[0]


async def test_a_claimed_device_is_logged_once_however_often_it_is_claimed(pins: IdentityPins) -> None:
    await pins.resolve(DeviceIdentity(MAC, "board"))
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    try:
        for i in range(50):
            await pins.resolve(DeviceIdentity(MAC, f"claimant-{i}"))
    finally:
        logger.remove(sink)
    assert len(lines) == 1 and "not the one it is pinned to" in lines[0]
    assert len(await pins.store.rebind_requests(MAC)) == 4  # bounded per device
