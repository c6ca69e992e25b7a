"""Long pure-Python loops on the event loop, in slices: other sessions run between the slices.

A device can hand a session hundreds of tools at once (tools/list pages, `mcp/registerTools`),
and turning each into what the model sees costs tens of microseconds. Done in one go, every
other session on the loop waits for the whole list; done here, each waits for at most one slice.

    public = await map_in_slices(convert, tools)          # same result as [convert(t) for t in tools]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

SLICE = 32
"""Items per slice: a slice of tool work stays well under a millisecond."""


async def map_in_slices(function: Callable[[T], R], items: Iterable[T], *, size: int = SLICE) -> list[R]:
    """`[function(item) for item in items]`, yielding to the event loop after every `size` items."""
    out: list[R] = []
    for index, item in enumerate(items, 1):
        out.append(function(item))
        if index % size == 0:
            await asyncio.sleep(0)
    return out
