from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from vixio.core.chunk import AudioChunk, Chunk, TextChunk
from vixio.core.station import Station


class Tag(Station):
    """Appends its name to every TextChunk and records what it saw."""

    handles = (TextChunk,)

    def __init__(self, name: str, delay: float = 0.0) -> None:
        super().__init__(name)
        self.delay = delay
        self.seen: list[Chunk] = []
        self.interrupts = 0

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        self.seen.append(chunk)
        if self.delay:
            await asyncio.sleep(self.delay)
        assert isinstance(chunk, TextChunk)
        yield TextChunk(text=f"{chunk.text}>{self.name}", role=chunk.role)

    async def on_interrupt(self) -> None:
        self.interrupts += 1


def text(value: str, **kwargs: object) -> TextChunk:
    return TextChunk(text=value, role="user", **kwargs)  # type: ignore[arg-type]


def audio(n: int = 320) -> AudioChunk:
    return AudioChunk(pcm=b"\x00\x01" * n, sample_rate=16000)


@pytest.fixture
async def no_leaked_tasks():
    """Asserts the test leaves no task behind besides the ones that existed before it."""
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert not leaked, f"tasks left behind: {leaked}"
