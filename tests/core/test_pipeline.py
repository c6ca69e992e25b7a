from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from vixio.core.chunk import (
    AudioChunk,
    Chunk,
    ErrorChunk,
    InterruptChunk,
    TextChunk,
    VADStartChunk,
)
from vixio.core.pipeline import Pipeline
from vixio.core.station import Station
from vixio.testing.harness import run_stations

from .conftest import Tag, audio, text

pytestmark = pytest.mark.unit


async def test_order_through_five_stations() -> None:
    stations = [Tag(f"s{i}") for i in range(5)]
    out = await run_stations(stations, [text(str(i)) for i in range(200)], queue_size=4)
    assert [c.text for c in out] == [f"{i}>s0>s1>s2>s3>s4" for i in range(200)]
    assert all(c.session_id == "test" for c in out)


async def test_unhandled_chunks_pass_through_in_order() -> None:
    sound, vad = audio(), VADStartChunk()
    out = await run_stations([Tag("a"), Tag("b")], [text("1"), sound, vad, text("2")])
    assert [c.kind for c in out] == ["text", "audio", "vad_start", "text"]
    assert out[1] is sound and out[2] is vad  # forwarded untouched, not copied
    assert [c.text for c in out if isinstance(c, TextChunk)] == ["1>a>b", "2>a>b"]


async def test_outputs_inherit_session_and_turn_of_their_input() -> None:
    pipeline = Pipeline([Tag("a")], session_id="s-1")
    async with pipeline:
        pipeline.begin_turn()
        pipeline.begin_turn()
        await pipeline.push(text("x"))
        chunk = await pipeline.get()
    assert (chunk.session_id, chunk.turn_id) == ("s-1", 2)


class Gate(Station):
    """Blocks on every chunk until released; records events in a shared log."""

    handles = (TextChunk,)

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(name)
        self.log = log
        self.release = asyncio.Event()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        self.log.append(f"{self.name}:start:{chunk.text}")
        await self.release.wait()
        self.log.append(f"{self.name}:done:{chunk.text}")
        yield chunk

    async def on_interrupt(self) -> None:
        self.log.append(f"{self.name}:interrupt")


async def test_interrupt_reaches_every_station_ahead_of_queued_data(no_leaked_tasks) -> None:
    log: list[str] = []
    gates = [Gate(f"g{i}", log) for i in range(3)]
    pipeline = Pipeline(gates, session_id="s", queue_size=8)
    async with pipeline:
        for i in range(6):
            await pipeline.push(text(f"old{i}"))
        await asyncio.sleep(0.01)
        assert log == ["g0:start:old0"]  # g0 is stuck on old0, the rest is queued

        new_turn = await pipeline.interrupt("abort")
        assert sorted(e for e in log if e.endswith("interrupt")) == ["g0:interrupt", "g1:interrupt", "g2:interrupt"]
        first = await pipeline.get()
        assert isinstance(first, InterruptChunk)
        assert (first.session_id, first.turn_id, first.reason) == ("s", new_turn, "abort")

        for gate in gates:
            gate.release.set()
        await pipeline.push(text("new"))
        await pipeline.join()
        out = pipeline.drain_output()

    assert [c.text for c in out] == ["new"]
    assert not any("old" in e and "done" in e for e in log), log  # nothing old finished
    assert not any(e.startswith(("g1:start:old", "g2:start:old")) for e in log)
    assert pipeline.dropped_stale >= 5


async def test_chunks_of_an_interrupted_turn_are_dropped() -> None:
    pipeline = Pipeline([Tag("a")], session_id="s")
    async with pipeline:
        old_turn = pipeline.turn_id
        await pipeline.interrupt("barge_in")
        # A late chunk still stamped with the old turn (e.g. from a slow provider) is dropped.
        await pipeline.push(text("late", turn_id=old_turn))
        await pipeline.push(text("fresh"))
        await pipeline.join()
        out = pipeline.drain_output()
    assert [c.kind for c in out] == ["interrupt", "text"]
    assert out[1].text == "fresh>a"
    assert pipeline.dropped_stale == 1


class BargeIn(Station):
    """Raises an interrupt in-band when it sees 'stop', then goes on emitting for the new turn."""

    handles = (TextChunk,)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        if chunk.text == "stop":
            yield InterruptChunk(reason="barge_in")
            yield TextChunk(text="after", role="user", turn_id=self.current_turn_id)
            yield TextChunk(text="stale", role="user")  # inherits the old turn: dropped
        else:
            yield chunk


async def test_station_can_raise_an_interrupt_and_keep_going() -> None:
    downstream = Tag("down")
    pipeline = Pipeline([BargeIn(), downstream], session_id="s")
    async with pipeline:
        await pipeline.push(text("stop"))
        await pipeline.join()
        out = pipeline.drain_output()
    assert [c.kind for c in out] == ["interrupt", "text"]
    assert out[1].text == "after>down"
    assert downstream.interrupts == 1


async def test_slow_station_applies_backpressure_with_bounded_queues() -> None:
    slow = Tag("slow", delay=0.002)
    stations = [Tag("a"), Tag("b"), slow]
    pipeline = Pipeline(stations, session_id="s", queue_size=4)
    received: list[Chunk] = []
    async with pipeline:

        async def consume() -> None:
            while len(received) < 300:
                received.append(await pipeline.get())

        consumer = asyncio.create_task(consume())
        max_in_flight = 0
        for i in range(300):
            await pipeline.push(text(str(i)))
            max_in_flight = max(max_in_flight, i + 1 - len(received))
        await consumer
    # Every queue stayed within its bound, so memory is bounded whatever the producer does.
    assert max(q.high_water for q in pipeline._inboxes) <= 4
    assert pipeline._output.high_water <= 4
    # The producer was held back: never more in flight than the queues and stations can hold.
    assert max_in_flight <= 4 * 4 + 3
    assert [c.text for c in received] == [f"{i}>a>b>slow" for i in range(300)]


async def test_push_nowait_fills_the_first_inbox_and_never_waits() -> None:
    release = asyncio.Event()

    class Held(Station):
        handles = (TextChunk,)

        async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
            await release.wait()
            yield chunk

    pipeline = Pipeline([Held("held"), Tag("a")], session_id="s", queue_size=2)
    async with pipeline:
        assert pipeline.push_nowait(text("0"))
        await asyncio.sleep(0.01)  # the held station took "0" and waits
        assert pipeline.push_nowait(text("1")) and pipeline.push_nowait(text("2"))
        assert not pipeline.can_push_nowait()
        assert not pipeline.push_nowait(text("3"))  # full: refused, nothing queued
        assert not pipeline.push_nowait(InterruptChunk(reason="x"))  # interrupts are awaited
        release.set()
        out = [await pipeline.get() for _ in range(3)]
        await pipeline.join()
        assert pipeline.can_push_nowait()
    assert [c.text for c in out] == ["0>a", "1>a", "2>a"]
    assert all(c.session_id == "s" and c.turn_id == 0 for c in out)
    with pytest.raises(RuntimeError):
        pipeline.push_nowait(text("late"))


class Explodes(Station):
    handles = (TextChunk,)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        if chunk.text == "boom":
            raise RuntimeError("provider down")
        yield chunk


async def test_station_exception_becomes_error_event_and_pipeline_goes_on() -> None:
    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(f"{m.record['extra'].get('session')} {m}"), level="ERROR")
    try:
        out = await run_stations(
            [Explodes(), Tag("after")], [text("ok"), text("boom"), text("ok2")], session_id="sess-9"
        )
    finally:
        logger.remove(sink)
    assert [c.kind for c in out] == ["text", "error", "text"]
    error = out[1]
    assert isinstance(error, ErrorChunk)
    assert error.source == "Explodes" and "provider down" in error.message and error.session_id == "sess-9"
    assert [c.text for c in out if isinstance(c, TextChunk)] == ["ok>after", "ok2>after"]
    assert any(line.startswith("sess-9") and "provider down" in line for line in lines)


class Sleeper(Station):
    handles = (TextChunk, AudioChunk)

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.stopped = False

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        self.started.set()
        await asyncio.sleep(3600)
        yield chunk

    async def stop(self) -> None:
        self.stopped = True


async def test_shutdown_leaves_no_task_behind(no_leaked_tasks) -> None:
    before = asyncio.all_tasks()
    sleeper = Sleeper()
    pipeline = Pipeline([Tag("a"), sleeper, Tag("b")], session_id="s", queue_size=2)
    await pipeline.start()
    assert len(asyncio.all_tasks() - before) == 3
    await pipeline.push(text("x"))
    await pipeline.push(text("y"))
    await sleeper.started.wait()
    await pipeline.stop()
    assert asyncio.all_tasks() - before == set()
    assert sleeper.stopped
    await pipeline.stop()  # idempotent


async def test_push_requires_a_running_pipeline() -> None:
    pipeline = Pipeline([Tag("a")])
    with pytest.raises(RuntimeError):
        await pipeline.push(text("x"))


async def test_empty_pipeline_passes_input_through() -> None:
    out = await run_stations([], [text("a"), audio()])
    assert [c.kind for c in out] == ["text", "audio"]


def test_pipeline_rejects_the_same_station_twice() -> None:
    tag = Tag("a")
    with pytest.raises(ValueError):
        Pipeline([tag, tag])


class Joiner(Station):
    """Joins queued text while its slow `process` runs; records what it processed."""

    handles = (TextChunk,)
    merges = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def merge(self, chunk: Chunk, following: Chunk) -> Chunk | None:
        if (
            not isinstance(chunk, TextChunk)
            or not isinstance(following, TextChunk)
            or "stop" in (chunk.text, following.text)
        ):
            return None
        return TextChunk(text=chunk.text + following.text, role=chunk.role, turn_id=chunk.turn_id)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        self.seen.append(chunk.text)
        await asyncio.sleep(0.01)
        yield chunk


async def test_a_merging_station_takes_what_queued_behind_it_in_one_step() -> None:
    joiner = Joiner()
    sound = audio()
    out = await run_stations([joiner], [text("a"), text("b"), text("c"), sound, text("d"), text("stop"), text("e")])
    # Everything queues before the station runs: a run of text is joined, audio (not handled)
    # ends a run, and "stop" joins nothing.
    assert joiner.seen == ["abc", "d", "stop", "e"]
    assert [c.kind for c in out] == ["text", "audio", "text", "text", "text"]
    assert out[1] is sound


async def test_a_merging_station_never_joins_chunks_of_an_interrupted_turn() -> None:
    joiner = Joiner()
    async with Pipeline([joiner], session_id="s") as pipeline:
        await pipeline.push(text("a"))
        await asyncio.sleep(0)  # "a" is being processed
        await pipeline.push(text("old"))
        await pipeline.interrupt("test")
        await pipeline.push(text("new"))
        await pipeline.push(text("er"))
        await pipeline.join()  # every chunk, joined or not, is accounted for
    assert "old" not in "".join(joiner.seen)
    assert joiner.seen[-1] == "newer"


class Split(Station):
    """Inline: every text becomes two, and the task that ran it is noted."""

    handles = (TextChunk,)
    inline = True

    def __init__(self, name: str = "split") -> None:
        super().__init__(name)
        self.tasks: list[str] = []
        self.interrupts = 0

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        self.tasks.append(asyncio.current_task().get_name())  # type: ignore[union-attr]
        assert isinstance(chunk, TextChunk)
        yield TextChunk(text=f"{chunk.text}.1", role=chunk.role)
        yield TextChunk(text=f"{chunk.text}.2", role=chunk.role)

    async def on_interrupt(self) -> None:
        self.interrupts += 1


async def test_an_inline_station_runs_in_the_task_before_it_in_order(no_leaked_tasks) -> None:
    split = Split()
    stations = [Tag("a"), split, Split("again"), Tag("b")]
    out = await run_stations(stations, [text(str(i)) for i in range(50)], queue_size=2)
    assert [c.text for c in out] == [f"{i}>a{s}>b" for i in range(50) for s in (".1.1", ".1.2", ".2.1", ".2.2")]
    assert set(split.tasks) == {"vixio-test-a"}  # no task of its own: no hand-over per chunk
    pipeline = Pipeline([Tag("a"), Split()], session_id="p")
    await pipeline.start()
    assert [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("vixio-p-")] == ["vixio-p-a"]
    await pipeline.stop()


async def test_a_first_station_marked_inline_still_has_its_task() -> None:
    out = await run_stations([Split(), Tag("b")], [text("x")])
    assert [c.text for c in out] == ["x.1>b", "x.2>b"]


async def test_a_chunk_emitted_from_another_task_waits_for_the_inline_station() -> None:
    """The host's chunk is inside the inline station, waiting for room downstream: a chunk
    emitted meanwhile (a tool speaking) goes through after all of it, not between its halves."""
    host = Tag("host")
    pipeline = Pipeline([host, Split(), Tag("slow", delay=0.05)], session_id="e", queue_size=1)
    await pipeline.start()
    reader = asyncio.create_task(asyncio.wait_for(_texts(pipeline, 6), 5))
    await pipeline.push(text("X"))  # X.1 keeps the slow station busy, X.2 fills its inbox
    await pipeline.push(text("A"))
    await asyncio.sleep(0.01)
    assert pipeline.stations[1].tasks == ["vixio-e-host"] * 2  # type: ignore[attr-defined]  # A waits inside
    emitting = asyncio.create_task(pipeline.emit(host, TextChunk(text="C", role="assistant")))
    await asyncio.sleep(0.01)
    assert len(pipeline.stations[1].tasks) == 2  # type: ignore[attr-defined]  # C waits outside the station
    await emitting
    got = await reader
    await pipeline.stop()
    assert got == [f"{x}>slow" for x in ("X>host.1", "X>host.2", "A>host.1", "A>host.2", "C.1", "C.2")]


async def _texts(pipeline: Pipeline, count: int) -> list[str]:
    return [(await pipeline.get()).text for _ in range(count)]  # type: ignore[union-attr]


async def test_an_interrupt_stops_an_inline_station_with_its_host(no_leaked_tasks) -> None:
    split = Split()
    pipeline = Pipeline([Tag("host"), split, Tag("slow", delay=5)], session_id="i", queue_size=1)
    await pipeline.start()
    await pipeline.push(text("old"))
    await asyncio.sleep(0.02)  # old.1 is with the slow station, old.2 waits inside the split
    await pipeline.interrupt("barge-in")
    assert split.interrupts == 1
    out = await asyncio.wait_for(pipeline.get(), 1)
    assert isinstance(out, InterruptChunk)
    pipeline.stations[2].delay = 0  # type: ignore[attr-defined]
    await pipeline.push(text("new"))
    texts = [(await asyncio.wait_for(pipeline.get(), 2)).text for _ in range(2)]  # type: ignore[union-attr]
    await pipeline.stop()
    assert texts == ["new>host.1>slow", "new>host.2>slow"]


class Barge(Station):
    """Inline, and raises an interrupt itself on "stop"."""

    handles = (TextChunk,)
    inline = True

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        if chunk.text.startswith("stop"):
            yield InterruptChunk(reason="inline")
            yield TextChunk(text=chunk.text, role=chunk.role, turn_id=self.current_turn_id)  # the new turn
            return
        yield chunk


async def test_an_inline_station_can_raise_an_interrupt_without_cancelling_its_host() -> None:
    pipeline = Pipeline([Tag("host"), Barge(), Tag("b")], session_id="r")
    await pipeline.start()
    await pipeline.push(text("stop"))
    first = await asyncio.wait_for(pipeline.get(), 2)
    second = await asyncio.wait_for(pipeline.get(), 2)
    await pipeline.stop()
    assert isinstance(first, InterruptChunk) and first.reason == "inline"
    assert second.text == "stop>host>b"  # type: ignore[union-attr]
