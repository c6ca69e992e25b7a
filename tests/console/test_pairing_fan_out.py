"""FanOutPairing: every worker's companions as one, a worker that does not answer left out."""

from __future__ import annotations

from typing import Any

import pytest

from vixio.console.pairing import FanOutPairing

pytestmark = pytest.mark.unit


class _Worker:
    def __init__(self, pending: list[dict[str, Any]], unpaired: int = 0) -> None:
        self.pending, self.unpaired, self.refreshed = pending, unpaired, 0

    async def state(self) -> dict[str, list[dict[str, Any]]]:
        return {"pending": list(self.pending), "companions": []}

    async def refresh(self) -> None:
        self.refreshed += 1

    async def unpair(self, pairing_id: str) -> int:
        return self.unpaired


class _Gone:
    async def state(self) -> dict[str, list[dict[str, Any]]]:
        raise ConnectionError("w1 is restarting")

    async def refresh(self) -> None:
        raise ConnectionError("w1 is restarting")

    async def unpair(self, pairing_id: str) -> int:
        raise ConnectionError("w1 is restarting")


async def test_answers_are_merged_and_a_silent_worker_is_left_out() -> None:
    first, second = _Worker([{"id": "a"}], unpaired=1), _Worker([{"id": "b"}], unpaired=2)
    fan_out = FanOutPairing(lambda: [first, _Gone(), second])
    assert await fan_out.state() == {"pending": [{"id": "a"}, {"id": "b"}], "companions": []}
    await fan_out.refresh()
    assert (first.refreshed, second.refreshed) == (1, 1)
    assert await fan_out.unpair("a") == 3
