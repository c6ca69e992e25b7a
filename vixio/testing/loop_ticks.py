"""LoopTicks: how many event-loop iterations a piece of code let pass (tests of hop counts).

    async with LoopTicks() as ticks:
        before = ticks.count
        await something()
        assert ticks.count == before  # it never suspended
"""

from __future__ import annotations

import asyncio


class LoopTicks:
    """A task that counts one tick per loop iteration while the context is open."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTicks:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)  # the ticker is running before the caller measures
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop = True
        if self._task is not None:
            await self._task

    async def _tick(self) -> None:
        while not self._stop:
            self.count += 1
            await asyncio.sleep(0)
