from __future__ import annotations

import asyncio

from vixio.core.chunk import Chunk, InterruptChunk
from vixio.core.pipeline import Pipeline
from vixio.core.session import Message, Session, SessionState

from .conftest import Tag, text


async def test_session_pumps_output_and_closes_cleanly(no_leaked_tasks) -> None:
    received: list[Chunk] = []
    arrived = asyncio.Event()

    async def on_output(chunk: Chunk) -> None:
        received.append(chunk)
        arrived.set()

    session = Session("s1", Pipeline([Tag("a")], session_id="s1"), on_output, device_id="aa:bb")
    async with session:
        await session.push(text("hi"))
        await asyncio.wait_for(arrived.wait(), 2)
        arrived.clear()
        await session.interrupt("abort")
        await asyncio.wait_for(arrived.wait(), 2)
    assert session.closed
    assert [c.kind for c in received] == ["text", "interrupt"]
    assert isinstance(received[1], InterruptChunk) and received[1].reason == "abort"


async def test_failing_output_handler_does_not_stop_the_session() -> None:
    calls: list[str] = []
    done = asyncio.Event()

    async def on_output(chunk: Chunk) -> None:
        calls.append(chunk.text)  # type: ignore[union-attr]
        if len(calls) == 1:
            raise ConnectionError("socket hiccup")
        done.set()

    async with Session("s2", Pipeline([Tag("a")], session_id="s2"), on_output) as session:
        await session.push(text("1"))
        await session.push(text("2"))
        await asyncio.wait_for(done.wait(), 2)
    assert calls == ["1>a", "2>a"]


def test_history_is_trimmed_to_its_limit() -> None:
    state = SessionState(max_history=3)
    for i in range(5):
        state.add_message(Message(role="user", content=str(i)))
    assert [m.content for m in state.history] == ["2", "3", "4"]
