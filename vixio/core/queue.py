"""A bounded asyncio queue that an interrupt can jump and purge.

`asyncio.Queue` cannot put an item at the front or remove queued items, and both are what an
interrupt needs: it must overtake queued data, and the data of the cancelled turn must go at
once (freeing memory and unblocking producers) instead of draining through every station.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class ChunkQueue(Generic[T]):
    """Bounded FIFO with `put_urgent` (front, ignores the bound) and `purge`."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self.high_water = 0
        """Largest number of items ever queued at once (urgent items included)."""
        self._items: deque[T] = deque()
        self._getters: list[asyncio.Future[None]] = []
        self._putters: list[asyncio.Future[None]] = []

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        """The queued items, oldest first (a snapshot: safe while the queue changes)."""
        return iter(list(self._items))

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    async def put(self, item: T) -> None:
        """Append, waiting while the queue is full (this is the backpressure)."""
        while self.full():
            await self._wait(self._putters)
        self._append(item)

    def put_nowait(self, item: T) -> None:
        if self.full():
            raise asyncio.QueueFull
        self._append(item)

    def put_urgent(self, item: T) -> None:
        """Insert at the front, ignoring the bound: control overtakes data."""
        self._items.appendleft(item)
        self._note_size()
        self._wake(self._getters)

    async def get(self) -> T:
        while not self._items:
            await self._wait(self._getters)
        return self._pop()

    def get_nowait(self) -> T:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._pop()

    def peek(self) -> T:
        """The item `get` would return next, left in place."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items[0]

    def purge(self, keep: Callable[[T], bool]) -> list[T]:
        """Remove every item for which `keep` is false; returns the removed items."""
        kept: deque[T] = deque()
        removed: list[T] = []
        for item in self._items:
            (kept if keep(item) else removed).append(item)
        self._items = kept
        if removed:
            self._wake(self._putters)
        return removed

    def _append(self, item: T) -> None:
        self._items.append(item)
        self._note_size()
        self._wake(self._getters)

    def _pop(self) -> T:
        item = self._items.popleft()
        self._wake(self._putters)
        return item

    def _note_size(self) -> None:
        if len(self._items) > self.high_water:
            self.high_water = len(self._items)

    @staticmethod
    async def _wait(waiters: list[asyncio.Future[None]]) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(future)
        try:
            await future
        finally:
            if future in waiters:
                waiters.remove(future)

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        # Wake everyone and let each re-check its condition: queues have one consumer and
        # few producers, so this is cheap and immune to lost wake-ups on cancellation.
        for future in waiters:
            if not future.done():
                future.set_result(None)
        waiters.clear()
