"""The claims part of the `Store` contract, against SQLite and a real redis-server: of several
clients racing for a free claim exactly one gets it; its holder renews it; it lapses after its
lease; only its holder releases it."""

from __future__ import annotations

import asyncio

import pytest

from vixio.state.store import Store

from .conftest import StoreFactory

pytestmark = pytest.mark.integration

NAME = "mqtt:aa:bb:cc:dd:ee:ff"


async def test_one_of_several_racing_clients_gets_a_free_claim(store: Store, open_client: StoreFactory) -> None:
    clients = [store, *[await open_client() for _ in range(3)]]
    holders = await asyncio.gather(*(client.claim(NAME, f"east/w{i}", ttl=30) for i, client in enumerate(clients)))
    [winner] = {holder for holder in holders}  # every caller is told the same holder
    assert winner in {f"east/w{i}" for i in range(4)}
    assert await store.claim(NAME, winner, ttl=30) == winner  # renewed
    assert await store.claim(NAME, "west/w0", ttl=30) == winner
    assert await store.claim("mqtt:02:00:00:00:00:01", "west/w0", ttl=30) == "west/w0"  # another name is free
    assert not await store.release(NAME, "west/w0")  # not its holder
    assert await store.release(NAME, winner)
    assert await store.claim(NAME, "west/w0", ttl=30) == "west/w0"


async def test_a_claim_its_holder_stops_renewing_lapses(store: Store) -> None:
    assert await store.claim(NAME, "east/w0", ttl=0.3) == "east/w0"
    assert await store.claim(NAME, "west/w0", ttl=30) == "east/w0"
    await asyncio.sleep(0.5)  # the holder died: nobody renewed it
    assert await store.claim(NAME, "west/w0", ttl=30) == "west/w0"
