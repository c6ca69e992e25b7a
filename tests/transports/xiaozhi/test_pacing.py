from __future__ import annotations

import asyncio

import pytest

from vixio.testing.loop_ticks import LoopTicks
from vixio.transports.xiaozhi.session.pacing import DownlinkPacer

pytestmark = pytest.mark.unit

FRAME = 0.060


class VirtualClock:
    """Time moves only when the pacer sleeps, so pacing is checked exactly and instantly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def frame(i: int) -> bytes:
    return bytes([i % 256]) * 10


def sent_frame(i: int) -> dict:
    return {"type": "audio", "data": frame(i)}


async def run_pacer(items, clock: VirtualClock, *, until: int, prebuffer: int = 5, batch: int = 1):
    sent: list[tuple[float, dict]] = []

    async def send(message: dict) -> None:
        sent.append((clock.now, message))

    pacer = DownlinkPacer(send, frame_duration=FRAME, prebuffer=prebuffer, batch=batch, clock=clock, sleep=clock.sleep)
    pacer.start()
    for item in items:
        if item == "END":

            async def stop() -> None:
                await send({"type": "tts", "state": "stop"})

            pacer.end(stop)
        elif isinstance(item, dict):
            pacer.send_message(item)
        else:
            pacer.send_frame(item)
    for _ in range(10_000):
        if len(sent) >= until:
            break
        await asyncio.sleep(0)
    await pacer.stop()
    return pacer, sent


async def test_prebuffer_then_real_time_then_stop_after_playback() -> None:
    clock = VirtualClock()
    start = clock.now
    items = [{"type": "tts", "state": "sentence_start", "text": "hi"}] + [frame(i) for i in range(40)] + ["END"]
    pacer, sent = await run_pacer(items, clock, until=42)
    assert sent[0][1]["state"] == "sentence_start"
    frames = [(t, m) for t, m in sent if m["type"] == "audio"]
    assert [m for _, m in frames] == [sent_frame(i) for i in range(40)]  # order kept
    for k, (t, _) in enumerate(frames):
        ahead = (k + 1) - (t - start) / FRAME  # frames sent minus frames played
        assert ahead <= 5 + 1e-9, f"frame {k} is {ahead:.2f} frames ahead"
        assert t == pytest.approx(start + max(0, k - 4) * FRAME), f"frame {k} late: gap"
    stop_time, stop = sent[-1]
    assert stop == {"type": "tts", "state": "stop"}
    assert stop_time == pytest.approx(start + 40 * FRAME)  # after the device played the last frame
    assert pacer.frames_sent == 40


async def test_batch_two_sends_frames_in_pairs_never_late_and_one_frame_more_ahead() -> None:
    clock = VirtualClock()
    start = clock.now
    items = [frame(i) for i in range(40)] + ["END"]
    pacer, sent = await run_pacer(items, clock, until=41, batch=2)
    frames = [(t, m) for t, m in sent if m["type"] == "audio"]
    assert [m for _, m in frames] == [sent_frame(i) for i in range(40)]
    wakeups = sorted({t for t, _ in frames})
    assert len(wakeups) <= 40 // 2 + 1  # the pre-buffer, then pairs
    for k, (t, _) in enumerate(frames):
        ahead = (k + 1) - (t - start) / FRAME
        assert ahead <= 5 + 1 + 1e-9, f"frame {k} is {ahead:.2f} frames ahead"
        assert t <= start + max(0, k - 4) * FRAME + 1e-9, f"frame {k} later than with batch 1"
    stop_time, stop = sent[-1]
    assert stop == {"type": "tts", "state": "stop"}
    assert stop_time == pytest.approx(start + 40 * FRAME)
    with pytest.raises(ValueError):
        DownlinkPacer(lambda m: asyncio.sleep(0), batch=0)


async def test_underrun_starts_a_new_burst_with_a_fresh_prebuffer() -> None:
    clock = VirtualClock()
    sent: list[tuple[float, dict]] = []

    async def send(message: dict) -> None:
        sent.append((clock.now, message))

    pacer = DownlinkPacer(send, frame_duration=FRAME, prebuffer=5, clock=clock, sleep=clock.sleep)
    pacer.start()
    for i in range(3):
        pacer.send_frame(frame(i))
    await asyncio.sleep(0.01)
    clock.now += 1.0  # the next sentence's audio comes a second later (slow TTS)
    for i in range(3, 10):
        pacer.send_frame(frame(i))
    for _ in range(1000):
        if len(sent) == 10:
            break
        await asyncio.sleep(0)
    await pacer.stop()
    second_burst = [t for t, _ in sent[3:]]
    assert second_burst[:5] == [second_burst[0]] * 5  # pre-buffer again, not a catch-up flood
    assert second_burst[5] == pytest.approx(second_burst[0] + FRAME)


async def test_clear_drops_unsent_frames_and_the_pending_stop() -> None:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    # Real (short) time here: the point is that a pending sleep is abandoned by clear().
    pacer = DownlinkPacer(send, frame_duration=0.02, prebuffer=5)
    stopped = []

    async def on_played() -> None:
        stopped.append(True)

    for i in range(20):
        pacer.send_frame(frame(i))
    pacer.end(on_played)
    pacer.start()
    await asyncio.sleep(0.05)
    assert 5 <= len(sent) < 20
    already = len(sent)
    dropped = pacer.clear()
    assert dropped == 20 - already and pacer.pending == 0
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(sent) == already and not stopped
    pacer.send_frame(frame(99))  # the pacer keeps working after a clear
    await asyncio.sleep(0.01)
    assert sent[-1] == sent_frame(99)
    await pacer.stop()


async def test_async_encoding_keeps_timing_and_never_sends_a_frame_cleared_while_encoding() -> None:
    clock = VirtualClock()
    sent: list[tuple[float, dict]] = []
    gate = asyncio.Event()
    gate.set()

    async def send(message: dict) -> None:
        sent.append((clock.now, message))

    async def encode_async(pcm: bytes) -> dict:
        await gate.wait()  # the codec thread, as slow as the test wants
        return {"type": "audio", "data": b"enc" + pcm}

    pacer = DownlinkPacer(
        send, encode_async=encode_async, frame_duration=FRAME, prebuffer=2, clock=clock, sleep=clock.sleep
    )
    pacer.start()
    for i in range(4):
        pacer.send_frame(frame(i))
    for _ in range(200):
        if len(sent) >= 4:
            break
        await asyncio.sleep(0)
    assert [message["data"] for _, message in sent] == [b"enc" + frame(i) for i in range(4)]
    times = [t - sent[0][0] for t, _ in sent]
    assert times == pytest.approx([0.0, 0.0, FRAME, 2 * FRAME])
    # A frame whose encoding is still running when playback is cleared is dropped, not sent late.
    gate.clear()
    clock.now += 1.0  # the device has played everything: the next frame is due at once
    pacer.send_frame(frame(9))
    for _ in range(5):
        await asyncio.sleep(0)
    assert pacer.clear() in (0, 1)
    gate.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(sent) == 4
    await pacer.stop()


async def test_a_prebuffer_burst_is_encoded_together_and_sent_at_once() -> None:
    # On a busy loop each round trip to the codec thread costs loop iterations: frames encoded
    # one at a time left the device with a single frame while the rest of the burst trickled in.
    sent: list[tuple[float, bytes]] = []
    loop = asyncio.get_running_loop()
    started: list[float] = []

    async def send(message: dict) -> None:
        sent.append((loop.time(), message["data"]))

    async def encode_async(pcm: bytes) -> dict:
        started.append(loop.time())
        await asyncio.sleep(0.05)  # one slow round trip to the codec thread
        return {"type": "audio", "data": pcm}

    pacer = DownlinkPacer(send, encode_async=encode_async, frame_duration=FRAME, prebuffer=5)
    pacer.start()
    for i in range(8):
        pacer.send_frame(frame(i))
    while len(sent) < 5:
        await asyncio.sleep(0.005)
    await pacer.stop()
    assert [data for _, data in sent[:5]] == [frame(i) for i in range(5)]
    assert max(started[:5]) - min(started[:5]) < 0.02  # the burst was encoded together
    assert sent[4][0] - sent[0][0] < 0.02  # and sent together, not 50 ms apart per frame


async def test_a_new_bursts_prebuffer_is_encoded_on_the_loop_and_leaves_at_once() -> None:
    # The first audio of a reply must not wait for a round trip to the codec thread (on a busy
    # loop that is tens of milliseconds); the frames after the pre-buffer still go there.
    sent: list[tuple[float, bytes]] = []
    loop = asyncio.get_running_loop()
    on_thread: list[bytes] = []
    on_loop: list[bytes] = []

    async def send(message: dict) -> None:
        sent.append((loop.time(), message["data"]))

    async def encode_async(pcm: bytes) -> dict:
        on_thread.append(pcm)
        await asyncio.sleep(0.05)  # one slow round trip to the codec thread
        return {"type": "audio", "data": pcm}

    def encode_now(pcm: bytes) -> dict:
        on_loop.append(pcm)
        return {"type": "audio", "data": pcm}

    pacer = DownlinkPacer(send, encode_async=encode_async, encode_now=encode_now, frame_duration=FRAME, prebuffer=5)
    started = loop.time()
    pacer.start()
    for i in range(8):
        pacer.send_frame(frame(i))
    while len(sent) < 8:
        await asyncio.sleep(0.005)
    await pacer.stop()
    assert [data for _, data in sent] == [frame(i) for i in range(8)]
    assert on_loop == [frame(i) for i in range(5)] and on_thread == [frame(i) for i in range(5, 8)]
    assert sent[4][0] - started < 0.03  # the pre-buffer did not wait for the 50 ms round trip


async def test_no_frame_is_encoded_on_the_loop_while_one_is_still_on_the_codec_thread() -> None:
    # The encoder has state and libopus runs without the GIL: two frames of one encoder at once
    # (frames dropped by clear() still encoding on the thread) would corrupt it.
    now = [1000.0]
    sent: list[bytes] = []
    gate = asyncio.Event()
    on_loop: list[bytes] = []
    running = 0
    overlapped = False

    async def send(message: dict) -> None:
        sent.append(message["data"])

    async def encode_async(pcm: bytes) -> dict:
        nonlocal running
        running += 1
        await gate.wait()
        running -= 1
        return {"type": "audio", "data": pcm}

    def encode_now(pcm: bytes) -> dict:
        nonlocal overlapped
        overlapped = overlapped or running > 0
        on_loop.append(pcm)
        return {"type": "audio", "data": pcm}

    async def sleep(seconds: float) -> None:
        await asyncio.Event().wait()  # time stands still: the pacer waits until clear() restarts it

    async def settle() -> None:
        for _ in range(30):
            await asyncio.sleep(0)

    pacer = DownlinkPacer(
        send,
        encode_async=encode_async,
        encode_now=encode_now,
        frame_duration=FRAME,
        prebuffer=2,
        clock=lambda: now[0],
        sleep=sleep,
    )
    pacer.start()
    for i in range(4):
        pacer.send_frame(frame(i))
    await settle()
    # Frames 0 and 1 went out at once; frames 2 and 3 are on the thread while the pacer waits for 2's time.
    assert sent == [frame(0), frame(1)] and on_loop == [frame(0), frame(1)] and running == 2
    assert pacer.clear() == 2
    now[0] += 1.0  # the device has played everything: a new burst
    pacer.send_frame(frame(9))
    await settle()
    assert sent == [frame(0), frame(1)] and frame(9) not in on_loop  # waits for the thread instead
    gate.set()
    await settle()
    assert sent == [frame(0), frame(1), frame(9)]
    now[0] += 1.0
    pacer.send_frame(frame(10))  # nothing on the thread any more: on the loop again
    await settle()
    assert sent[-1] == frame(10) and on_loop[-1] == frame(10)
    assert not overlapped
    await pacer.stop()


async def test_with_send_many_what_is_due_together_goes_in_one_call_in_order() -> None:
    clock = VirtualClock()
    start = clock.now
    calls: list[tuple[float, list[dict]]] = []

    async def send(message: dict) -> None:
        raise AssertionError("with send_many, single sends are not used")

    async def send_many(messages: list[dict]) -> None:
        calls.append((clock.now, messages))

    pacer = DownlinkPacer(
        send, send_many=send_many, frame_duration=FRAME, prebuffer=5, batch=2, clock=clock, sleep=clock.sleep
    )
    pacer.start()
    start_message = {"type": "tts", "state": "start"}
    sentence = {"type": "tts", "state": "sentence_start", "text": "hi"}
    pacer.send_message(start_message)
    pacer.send_message(sentence)
    for i in range(6):
        pacer.send_frame(frame(i))
    second = {"type": "tts", "state": "sentence_start", "text": "there"}
    pacer.send_message(second)
    for i in range(6, 11):
        pacer.send_frame(frame(i))
    for _ in range(1000):
        if sum(len(m) for _, m in calls) >= 14:
            break
        await asyncio.sleep(0)
    await pacer.stop()
    flat = [m for _, batch in calls for m in batch]
    assert (
        flat
        == [
            start_message,
            sentence,
            *[sent_frame(i) for i in range(6)],
            second,
            *[sent_frame(i) for i in range(6, 11)],
        ][: len(flat)]
        and len(flat) == 14
    )
    # One call for the messages, the pre-buffer (frame 5 is due a frame later: with batch=2 it
    # goes along) and the message queued behind it; then a pair per wake-up.
    assert [len(batch) for _, batch in calls] == [9, 2, 2, 1]
    assert calls[0][0] == start and calls[1][0] == pytest.approx(start + 2 * FRAME)
    assert pacer.frames_sent == 11


async def test_a_kick_sends_what_is_due_from_the_callers_task_without_a_loop_iteration() -> None:
    """An idle pacer's task would send a reply's first audio only at its wake-up (a loop
    iteration, ~10-15 ms on a busy server): `kick()` sends it from the producer, in one call;
    the task paces the rest."""
    clock = VirtualClock()
    start = clock.now
    calls: list[tuple[float, str, list[dict]]] = []

    async def send_many(messages: list[dict]) -> None:
        calls.append((clock.now, asyncio.current_task().get_name(), messages))  # type: ignore[union-attr]

    pacer = DownlinkPacer(
        send_many=send_many, frame_duration=FRAME, prebuffer=5, batch=2, clock=clock, sleep=clock.sleep
    )
    pacer.start()
    await asyncio.sleep(0)  # the task waits for something to send
    start_message = {"type": "tts", "state": "start"}
    async with LoopTicks() as ticks:
        before = ticks.count
        pacer.send_message(start_message)
        for i in range(9):
            pacer.send_frame(frame(i))
        pacer.kick()
        assert ticks.count == before and len(calls) == 1  # sent already, in this task
    assert calls[0][2] == [start_message, *[sent_frame(i) for i in range(6)]]  # pre-buffer and the pair due next
    assert calls[0][1] == asyncio.current_task().get_name()  # type: ignore[union-attr]
    for _ in range(1000):
        if sum(len(m) for *_, m in calls) >= 10:
            break
        await asyncio.sleep(0)
    await pacer.stop()
    assert [m for *_, batch in calls for m in batch] == [start_message, *[sent_frame(i) for i in range(9)]]
    assert [(when - start, task, len(batch)) for when, task, batch in calls[1:]] == [
        (pytest.approx(2 * FRAME), "vixio-downlink-pacer", 2),
        (pytest.approx(4 * FRAME), "vixio-downlink-pacer", 1),
    ]


async def test_a_kick_does_nothing_while_the_task_is_busy_and_its_send_keeps_the_order() -> None:
    clock = VirtualClock()
    calls: list[list[dict]] = []
    gate = asyncio.Event()

    async def send_many(messages: list[dict]) -> None:
        if not calls:
            await gate.wait()  # the kick's send has to wait (a busy socket)
        calls.append(messages)

    pacer = DownlinkPacer(
        send_many=send_many, frame_duration=FRAME, prebuffer=2, batch=1, clock=clock, sleep=clock.sleep
    )
    pacer.start()
    await asyncio.sleep(0)
    for i in range(2):
        pacer.send_frame(frame(i))
    pacer.kick()  # its send waits at the gate
    pacer.send_frame(frame(2))
    pacer.kick()  # the first kick's send is not done: nothing more from here
    for _ in range(20):
        await asyncio.sleep(0)
    assert calls == []  # the task's frame 2 waits for the kick's send, not overtaking it
    gate.set()
    for _ in range(1000):
        if sum(map(len, calls)) >= 3:
            break
        await asyncio.sleep(0)
    await pacer.stop()
    assert calls == [[sent_frame(0), sent_frame(1)], [sent_frame(2)]]


async def test_a_frame_ready_in_time_but_sent_after_the_device_ran_dry_is_late() -> None:
    clock = VirtualClock()
    sent: list[dict] = []
    late: list[float] = []

    async def slow_send(message: dict) -> None:
        sent.append(message)
        if len(sent) == 8:  # the loop stalls for 1 s after frame 7: the device runs dry meanwhile
            clock.now += 1.0
        await asyncio.sleep(0)

    pacer = DownlinkPacer(
        slow_send,
        frame_duration=FRAME,
        prebuffer=5,
        clock=clock,
        sleep=clock.sleep,
        on_late_frame=lambda: late.append(clock.now),
    )
    pacer.start()
    for i in range(12):
        pacer.send_frame(frame(i))
    for _ in range(10_000):
        if len(sent) == 12:
            break
        await asyncio.sleep(0)
    await pacer.stop()
    assert len(sent) == 12
    assert pacer.late_frames == 1 and len(late) == 1  # frame 8: one underrun, then a fresh pre-buffer


async def test_a_pause_of_the_reply_itself_or_a_new_reply_is_not_late() -> None:
    clock = VirtualClock()
    late: list[int] = []
    sent2: list[dict] = []

    async def send(message: dict) -> None:
        sent2.append(message)

    pacer = DownlinkPacer(
        send, frame_duration=FRAME, prebuffer=5, clock=clock, sleep=clock.sleep, on_late_frame=lambda: late.append(1)
    )
    pacer.start()
    for i in range(6):
        pacer.send_frame(frame(i))
    for _ in range(1000):
        await asyncio.sleep(0)
    clock.now += 2.0  # the next sentence comes 2 s later (slow TTS): the device ran dry, no frame waited
    for i in range(6):
        pacer.send_frame(frame(i))

    async def stop() -> None:
        await send({"type": "tts", "state": "stop"})

    pacer.end(stop)
    for _ in range(1000):
        await asyncio.sleep(0)
    pacer.send_frame(frame(0))  # a new reply after the last one was played
    for _ in range(1000):
        await asyncio.sleep(0)
    await pacer.stop()
    assert len(sent2) == 14 and late == [] and pacer.late_frames == 0
