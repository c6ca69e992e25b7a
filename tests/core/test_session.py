from __future__ import annotations

import asyncio

import pytest

from vixio.core.chunk import Chunk, InterruptChunk
from vixio.core.pipeline import Pipeline
from vixio.core.session import Message, Session, SessionState

from .conftest import Tag, text

pytestmark = pytest.mark.unit


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


async def test_output_is_handled_in_the_last_stations_task_when_nothing_waits(no_leaked_tasks) -> None:
    """The pump's wake-up is a loop iteration (~10-15 ms on a busy server): an output chunk with
    nothing queued before it is handled at once, by the task of the station that made it."""
    handled_by: list[str] = []
    arrived = asyncio.Event()

    async def on_output(chunk: Chunk) -> None:
        handled_by.append(asyncio.current_task().get_name())  # type: ignore[union-attr]
        arrived.set()

    async with Session("s3", Pipeline([Tag("a"), Tag("b")], session_id="s3"), on_output) as session:
        await session.push(text("hi"))
        await asyncio.wait_for(arrived.wait(), 2)
    assert handled_by == ["vixio-s3-b"]


async def test_output_keeps_its_order_when_a_handler_waits(no_leaked_tasks) -> None:
    """The first chunk's handler waits: what follows is queued behind it, not handled at once."""
    events: list[str] = []
    release = asyncio.Event()
    done = asyncio.Event()

    async def on_output(chunk: Chunk) -> None:
        name = chunk.text.split(">")[0] if not isinstance(chunk, InterruptChunk) else "interrupt"  # type: ignore[union-attr]
        events.append(f"start {name}")
        if name == "1":
            await release.wait()
        events.append(f"end {name}")
        if name == "3":
            done.set()

    async with Session("s4", Pipeline([Tag("a")], session_id="s4"), on_output) as session:
        await session.push(text("1"))
        while "start 1" not in events:
            await asyncio.sleep(0)
        await session.push(text("2"))
        await session.push(text("3"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert events == ["start 1"]  # 2 and 3 wait for 1
        release.set()
        await asyncio.wait_for(done.wait(), 2)
    assert events == ["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"]


async def test_closing_cancels_a_handler_still_waiting(no_leaked_tasks) -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def on_output(chunk: Chunk) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    session = Session("s5", Pipeline([Tag("a")], session_id="s5"), on_output)
    async with session:
        await session.push(text("1"))
        await asyncio.wait_for(started.wait(), 2)
    assert cancelled == [True]


async def test_an_interrupt_waits_for_the_handler_in_progress(no_leaked_tasks) -> None:
    """As with the pump alone: the interrupt is handled after the chunk being handled, and the
    queued chunks of the cancelled turn are not handled at all."""
    events: list[str] = []
    release = asyncio.Event()
    done = asyncio.Event()

    async def on_output(chunk: Chunk) -> None:
        name = "interrupt" if isinstance(chunk, InterruptChunk) else chunk.text.split(">")[0]  # type: ignore[union-attr]
        events.append(name)
        if name == "1":
            await release.wait()
        if name == "interrupt":
            done.set()

    async with Session("s6", Pipeline([Tag("a")], session_id="s6"), on_output) as session:
        await session.push(text("1"))
        while not events:
            await asyncio.sleep(0)
        await session.push(text("2"))
        await session.pipeline.join()
        await session.interrupt("abort")
        release.set()
        await asyncio.wait_for(done.wait(), 2)
    assert events == ["1", "interrupt"]
