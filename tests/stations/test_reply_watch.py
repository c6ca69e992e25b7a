"""Time limits on an agent's event stream: first token, gap, no limit while a tool runs, filler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from vixio.providers.agent.base import AgentEvent, AgentTextDelta, AgentTextEnd, AgentToolCall, AgentToolResult
from vixio.stations.agent.reply_watch import FILLER, ReplyTimeout, ReplyTimeouts, watch_reply

pytestmark = pytest.mark.unit


class Scripted:
    """An event stream with a pause (seconds) before each event; records whether it was closed."""

    def __init__(self, *steps: tuple[float, AgentEvent]) -> None:
        self.steps = steps
        self.closed = False

    async def events(self) -> AsyncIterator[AgentEvent]:
        try:
            for pause, event in self.steps:
                await asyncio.sleep(pause)
                yield event
        finally:
            self.closed = True


async def collect(stream: AsyncIterator[object]) -> list[object]:
    return [item async for item in stream]


async def test_events_pass_through_in_order() -> None:
    script = Scripted((0, AgentTextDelta("a")), (0.01, AgentTextDelta("b")))
    out = await collect(watch_reply(script.events(), ReplyTimeouts(first_token=1, gap=1)))
    assert out == [AgentTextDelta("a"), AgentTextDelta("b")] and script.closed


async def test_a_silent_model_hits_the_first_token_limit_and_its_stream_is_closed() -> None:
    script = Scripted((5, AgentTextDelta("late")))
    with pytest.raises(ReplyTimeout, match=r"sent nothing for 0.2 s \(agent.first_token_timeout\)") as info:
        await collect(watch_reply(script.events(), ReplyTimeouts(first_token=0.2, gap=5), where="http://m"))
    assert info.value.phase == "first_token" and "http://m" in str(info.value)
    assert script.closed


async def test_a_stall_mid_answer_hits_the_gap_limit() -> None:
    script = Scripted((0, AgentTextDelta("One. ")), (5, AgentTextDelta("Two.")))
    seen: list[object] = []
    with pytest.raises(ReplyTimeout, match="stopped streaming for 0.2 s"):
        async for item in watch_reply(script.events(), ReplyTimeouts(first_token=5, gap=0.2)):
            seen.append(item)
    assert seen == [AgentTextDelta("One. ")]


async def test_no_limit_while_a_tool_runs_and_the_first_token_clock_restarts_after_it() -> None:
    script = Scripted(
        (0, AgentToolCall("c1", "slow", "{}")),
        (0.5, AgentToolResult("c1", "slow", "ok")),
        (0.1, AgentTextDelta("Done.")),
    )
    out = await collect(watch_reply(script.events(), ReplyTimeouts(first_token=0.3, gap=0.3)))
    assert out[-1] == AgentTextDelta("Done.")
    late_after_tool = Scripted(
        (0, AgentToolCall("c1", "t", "{}")), (0, AgentToolResult("c1", "t", "ok")), (5, AgentTextDelta("late"))
    )
    with pytest.raises(ReplyTimeout) as info:
        await collect(watch_reply(late_after_tool.events(), ReplyTimeouts(first_token=0.2, gap=5)))
    assert info.value.phase == "first_token"


async def test_the_filler_comes_once_before_a_slow_first_token() -> None:
    script = Scripted((0.5, AgentTextDelta("Here.")), (0.01, AgentTextDelta(" More.")))
    out = await collect(watch_reply(script.events(), ReplyTimeouts(first_token=2, gap=2, filler_after=0.1)))
    assert out == [FILLER, AgentTextDelta("Here."), AgentTextDelta(" More.")]
    fast = Scripted((0, AgentTextDelta("Quick.")))
    assert await collect(watch_reply(fast.events(), ReplyTimeouts(filler_after=0.1))) == [AgentTextDelta("Quick.")]


async def test_a_failing_stream_raises_its_own_error() -> None:
    async def broken() -> AsyncIterator[AgentEvent]:
        yield AgentTextDelta("Hi")
        raise RuntimeError("connection lost")

    with pytest.raises(RuntimeError, match="connection lost"):
        await collect(watch_reply(broken(), ReplyTimeouts()))


async def test_cancelling_the_consumer_closes_the_stream() -> None:
    script = Scripted((0, AgentTextDelta("a")), (10, AgentTextDelta("b")))

    async def consume() -> None:
        async for _ in watch_reply(script.events(), ReplyTimeouts(first_token=20, gap=20)):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert script.closed


async def test_the_providers_own_timeout_is_not_taken_for_the_gap_limit() -> None:
    async def http_timeout() -> AsyncIterator[AgentEvent]:
        yield AgentTextDelta("Hi")
        raise TimeoutError("read timed out")

    with pytest.raises(TimeoutError, match="read timed out"):
        await collect(watch_reply(http_timeout(), ReplyTimeouts(first_token=5, gap=5)))


async def test_events_are_read_in_the_consumers_task() -> None:
    # Each extra task is a loop iteration per token; under load those iterations are the latency.
    async def many() -> AsyncIterator[AgentEvent]:
        for n in range(200):
            await asyncio.sleep(0)
            yield AgentTextDelta(str(n))

    before = len(asyncio.all_tasks())
    seen = 0
    async for _ in watch_reply(many(), ReplyTimeouts(first_token=5, gap=5)):
        assert len(asyncio.all_tasks()) == before
        seen += 1
    assert seen == 200


async def test_a_timeout_closes_the_stream() -> None:
    script = Scripted((0, AgentTextDelta("a")), (10, AgentTextDelta("b")))
    with pytest.raises(ReplyTimeout):
        await collect(watch_reply(script.events(), ReplyTimeouts(first_token=5, gap=0.1)))
    assert script.closed


async def test_a_reply_that_stays_silent_hits_the_silence_limit_however_the_model_streams() -> None:
    # A token every 0.1 s (never a gap) that is never heard: no audio comes of it.
    script = Scripted(*[(0.1, AgentTextDelta("<think>"))] * 20)
    started = time.monotonic()
    with pytest.raises(ReplyTimeout, match=r"left the user in silence for 0.5 s \(agent.silence_timeout\)") as info:
        await collect(
            watch_reply(script.events(), ReplyTimeouts(first_token=5, gap=5, silence=0.5), audio_until=lambda: 0.0)
        )
    assert info.value.phase == "silence" and 0.5 <= time.monotonic() - started < 0.8
    assert script.closed


async def test_audio_moves_the_silence_limit_on_while_the_model_is_awaited() -> None:
    # The model pauses 0.6 s (more than the 0.4 s limit) while 0.5 s of audio made at its start plays.
    loop = asyncio.get_running_loop()
    heard_until = loop.time() + 0.5
    script = Scripted((0, AgentTextDelta("One. ")), (0.6, AgentTextDelta("Two.")))
    out = await collect(
        watch_reply(script.events(), ReplyTimeouts(first_token=5, gap=5, silence=0.4), audio_until=lambda: heard_until)
    )
    assert out == [AgentTextDelta("One. "), AgentTextDelta("Two.")]
    script = Scripted((0, AgentTextDelta("One. ")), (1.2, AgentTextDelta("Two.")))
    heard_until = loop.time() + 0.5
    with pytest.raises(ReplyTimeout) as info:
        await collect(
            watch_reply(
                script.events(), ReplyTimeouts(first_token=5, gap=5, silence=0.4), audio_until=lambda: heard_until
            )
        )
    assert info.value.phase == "silence"


async def test_the_silence_limit_applies_before_the_first_token_with_a_filler_too() -> None:
    script = Scripted((5, AgentTextDelta("late")))
    seen: list[object] = []
    with pytest.raises(ReplyTimeout) as info:
        async for item in watch_reply(
            script.events(), ReplyTimeouts(first_token=5, gap=5, filler_after=0.1, silence=0.4), audio_until=lambda: 0.0
        ):
            seen.append(item)
    assert seen == [FILLER] and info.value.phase == "silence"


async def test_no_silence_limit_while_a_tool_runs() -> None:
    script = Scripted(
        (0, AgentToolCall("c1", "slow", "{}")),
        (0.6, AgentToolResult("c1", "slow", "ok")),
        (0.1, AgentTextDelta("Done.")),
    )
    out = await collect(
        watch_reply(script.events(), ReplyTimeouts(first_token=1, gap=1, silence=0.3), audio_until=lambda: 0.0)
    )
    assert out[-1] == AgentTextDelta("Done.")


async def test_a_pause_after_text_calls_on_pause_once() -> None:
    pauses: list[float] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    script = Scripted(
        (0, AgentTextDelta("Hello")),
        (0.5, AgentTextDelta(" there")),
        (0.05, AgentTextDelta("!")),
        (0.5, AgentTextEnd()),
        (0.5, AgentTextDelta("")),
    )
    out = await collect(
        watch_reply(
            script.events(),
            ReplyTimeouts(first_token=5, gap=5, pause=0.2),
            on_pause=lambda: pauses.append(loop.time() - started),
        )
    )
    assert len(out) == 5
    # After "Hello" and after "!"; not after the text ended, and not again while the same pause lasts.
    assert len(pauses) == 2, pauses
    assert 0.2 <= pauses[0] < 0.4 and 0.75 <= pauses[1] < 0.95


async def test_a_steady_slow_model_is_spoken_at_half_the_silence_limit_and_not_cut() -> None:
    # A word every 0.1 s (never a pause), no sentence end: after 0.5 s of silence (half of 1 s)
    # what arrived is spoken; the "audio" that makes moves the silence limit on.
    loop = asyncio.get_running_loop()
    started = loop.time()
    heard_until = 0.0
    pauses: list[float] = []

    def speak() -> None:
        nonlocal heard_until
        pauses.append(loop.time() - started)
        heard_until = loop.time() + 0.3  # the TTS makes 0.3 s of audio of it

    script = Scripted(*[(0.1, AgentTextDelta("word "))] * 20)
    out = await collect(
        watch_reply(
            script.events(),
            ReplyTimeouts(first_token=5, gap=5, silence=1.0, pause=5),
            audio_until=lambda: heard_until,
            on_pause=speak,
        )
    )
    assert len(out) == 20  # never cut
    assert pauses and 0.5 <= pauses[0] < 0.7, pauses
    assert all(later - earlier >= 0.5 for earlier, later in zip(pauses, pauses[1:], strict=False)), pauses
