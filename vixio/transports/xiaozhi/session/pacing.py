"""Downlink pacing: Opus frames at real time, a small pre-buffer ahead.

The firmware's decode queue holds 40 packets and silently drops the rest, so the server must not
run ahead of playback; too little ahead and the speaker stutters on network jitter. The pacer
sends `prebuffer` frames at once, then one frame per frame duration, counting from the start of
the current burst (absolute deadlines, so sleep jitter does not accumulate). When the queue runs
dry the device's buffer drains; the next frame starts a new burst.

Frames are queued as PCM (or whatever `encode` takes) and encoded only when their turn to go
comes, so the encoding CPU is spread evenly over playback instead of bursting when a TTS
chunk arrives — that burst would delay every other session's frames. With `encode_async`
(the codec thread), the frames near the head of the queue (a pre-buffer's worth) are encoded
ahead, together, while the pacer waits for their deadlines: a frame that is due is ready, and a
burst goes out in one step. On a busy loop every await that suspends costs a loop iteration,
which is what a frame waits for: encoding one frame at a time made each pre-buffer frame wait
for its own round trip to the codec thread, and the device ran dry. With `encode_now` as well,
the pre-buffer of a new burst (the start of a reply: ~1.2 ms for 5 frames) is encoded on the
loop, so the first audio leaves without waiting for that round trip — never while one of the
encoder's frames is still on the codec thread (the encoder has state, and one frame at a time).

With `batch=4` (what the Xiaozhi connection uses), a wake-up that sends a due frame also sends
the next three, due up to three frames later: a quarter of the pacer's (and the socket writer's)
loop wake-ups and task steps per reply, for at most three frames more of lead (the firmware's
queue holds 40).

Everything due at once (a pre-buffer, a group of frames, the messages queued between its frames such as
`tts sentence_start`) goes out in order, in one `send_many` call when one is given (one socket
write), before the pacer waits again. `kick()` sends what is due from the producer's own task
while the pacer's task is idle: a reply's first audio leaves without waiting for that task's
wake-up (a loop iteration, ~10-15 ms on a busy server). An end marker waits until the device
has played everything sent (so `tts stop` never cuts the tail), then runs its callback.
`clear()` drops everything unsent at once (abort, barge-in). `hold()` keeps everything unsent
where it is (speech over the reply that may be a barge-in: the device plays out what it has) and
`release()` lets it go on as a new burst, with a fresh pre-buffer.

A frame is late when it was queued before the device had played everything sent before it in
its reply, yet went out after that: the device ran dry because the server (loop, codec) did not
keep up. A pause of the reply itself (a slow sentence, a tool call) is not lateness: the frame
was not there yet. `late_frames` counts them and `on_late_frame` is called for each.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from vixio.core.eager import eager_task
from vixio.core.protocol import Message

Send = Callable[[Message], Awaitable[None]]
SendMany = Callable[[list[Message]], Coroutine[Any, Any, None]]
"""A coroutine function: a kick of the queue runs its first step at once (`eager_task`)."""
Encode = Callable[[bytes], Message]
EncodeAsync = Callable[[bytes], Awaitable[Message]]


def _as_audio_message(frame: bytes) -> Message:
    return {"type": "audio", "data": frame}


@dataclass(slots=True)
class _Frame:
    pcm: bytes
    queued_at: float
    encoding: asyncio.Future[Message] | None = None
    message: Message | None = None
    """Encoded on the loop (`encode_now`)."""


@dataclass(slots=True)
class _End:
    on_played: Callable[[], Awaitable[None]]


class DownlinkPacer:
    """One per session; runs as one asyncio task (no thread)."""

    def __init__(
        self,
        send: Send | None = None,
        *,
        send_many: SendMany | None = None,
        encode: Encode = _as_audio_message,
        encode_async: EncodeAsync | None = None,
        encode_now: Encode | None = None,
        frame_duration: float = 0.060,
        prebuffer: int = 5,
        batch: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_late_frame: Callable[[], None] | None = None,
    ) -> None:
        if send is None and send_many is None:
            raise ValueError("DownlinkPacer needs send or send_many")
        self._send = send
        self._send_many = send_many
        self._encode = encode
        self._encode_async = encode_async
        self._encode_now = encode_now if encode_async is not None else None
        self._encoding = 0  # encode_async calls not finished yet
        self._generation = 0  # bumped by clear(): a frame encoded before a clear is never sent
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.frame_duration = frame_duration
        self.prebuffer = prebuffer
        self.batch = batch
        """Frames sent per wake-up: a frame due within `batch - 1` frame durations goes now."""
        self._clock = clock
        self._sleep = sleep
        self._queue: deque[_Frame | Message | _End] = deque()
        self._wakeup = asyncio.Event()
        self._burst_start = 0.0
        self._burst_frames = 0
        self._task: asyncio.Task[None] | None = None
        self._waiting_on_time = False
        self._idle = False  # the task waits for something to be queued (nothing is due or held)
        self._kicked: asyncio.Future[None] | None = None  # a kick's send that had to wait
        self.held = False
        """`hold()`: nothing is sent until `release()` (or `clear()`)."""
        self.frames_sent = 0
        self.frames_dropped = 0
        self.late_frames = 0
        self._on_late_frame = on_late_frame

    # --- producer side ------------------------------------------------------------------------

    def send_frame(self, frame: bytes) -> None:
        """Queue one frame of audio; `encode` turns it into its message when it is sent."""
        self._push(_Frame(frame, self._clock()))

    def send_message(self, message: Message) -> None:
        """Queue a JSON message that must go out in order with the audio."""
        self._push(message)

    def end(self, on_played: Callable[[], Awaitable[None]]) -> None:
        """Run `on_played` once everything queued before it has been sent and played."""
        self._push(_End(on_played))

    def hold(self) -> None:
        """Send nothing more until `release()`: the queue stays as it is."""
        self.held = True

    def release(self) -> None:
        """Send on from where `hold()` stopped; the device has played out meanwhile, so the next
        frame starts a new burst (pre-buffer first)."""
        self.held = False
        self._wakeup.set()

    def clear(self) -> int:
        """Drop every unsent frame, message and end marker (and any hold); returns the frames dropped."""
        dropped = sum(1 for item in self._queue if isinstance(item, _Frame))
        self.held = False
        self._queue.clear()
        self._generation += 1
        self.frames_dropped += dropped
        self._burst_frames = 0
        if self._task is not None and self._waiting_on_time:
            # Abandon a sleep that was timing an item we just dropped.
            self._task.cancel()
            self._task = None
            self.start()
        return dropped

    def kick(self) -> None:
        """Send what is due now, from the caller, when the pacer's task is idle (see the module
        doc); the task carries on with the rest (frames not due yet, end markers)."""
        if (
            self.held
            or not self._idle
            or self._send_many is None
            or (self._kicked is not None and not self._kicked.done())
        ):
            return
        out: list[Message] = []
        while self._queue:
            item = self._queue[0]
            if isinstance(item, _End):
                break
            if isinstance(item, _Frame):
                if self._delay_for_next_frame(item) > 0:
                    break
                if self._encode_async is not None:
                    self._encode_new_burst_now()
                    if item.message is None:
                        break  # for the codec thread: the task sends it once encoded
                    message = item.message
                else:
                    message = self._encode(item.pcm)
                self._burst_frames += 1
                self.frames_sent += 1
            else:
                message = item
            self._queue.popleft()
            out.append(message)
        if out:
            sent = eager_task(self._send_many(out), name="vixio-downlink-kick")
            if not sent.done() or sent.cancelled() or sent.exception() is not None:
                sent.add_done_callback(_consume_result)
                self._kicked = sent  # the task's next send waits for it (and raises what it raised)

    @property
    def pending(self) -> int:
        return len(self._queue)

    @property
    def buffered_seconds(self) -> float:
        """Estimated audio sent but not yet played by the device."""
        return max(0.0, self._burst_start + self._burst_frames * self.frame_duration - self._clock())

    def _push(self, item: _Frame | Message | _End) -> None:
        self._queue.append(item)
        self._wakeup.set()

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="vixio-downlink-pacer")

    async def stop(self) -> None:
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        out: list[Message] = []  # taken from the queue, due now: sent together before any wait
        while True:
            if not self._queue or self.held:
                await self._flush(out)
                if not self._queue or self.held:
                    self._wakeup.clear()
                    self._idle = True
                    try:
                        await self._wakeup.wait()
                    finally:
                        self._idle = False
                continue
            item = self._queue[0]
            if isinstance(item, _End):
                await self._flush(out)
                await self._wait(self.buffered_seconds)
                if self._queue and self._queue[0] is item and not self.held:
                    self._queue.popleft()
                    self._burst_frames = 0  # the reply was played: the next one starts afresh
                    await item.on_played()
                continue
            if isinstance(item, _Frame):
                generation = self._generation
                delay = self._delay_for_next_frame(item)
                if self._encode_async is not None:
                    self._encode_new_burst_now()
                    self._encode_ahead()  # on the codec thread while we wait for the deadlines
                if delay > 0:
                    await self._flush(out)
                    await self._wait(delay)
                if not self._queue or self._queue[0] is not item or self.held:
                    continue  # cleared or held while waiting
                self._queue.popleft()
                if item.message is not None:
                    message = item.message
                elif item.encoding is not None:
                    if not item.encoding.done():
                        await self._flush(out)
                    message = await item.encoding
                else:
                    message = self._encode(item.pcm)
                if generation != self._generation:
                    continue  # cleared while it was being encoded: it must not follow `tts stop`
                self._burst_frames += 1
                self.frames_sent += 1
                out.append(message)
            else:
                self._queue.popleft()
                out.append(item)

    async def _flush(self, out: list[Message]) -> None:
        """Send what `_run` took from the queue, in order (with `send_many`, in one call)."""
        if self._kicked is not None:
            kicked, self._kicked = self._kicked, None
            await kicked  # a kick's send goes before anything queued after it (and an end's callback)
        if not out:
            return
        batch = out.copy()
        out.clear()
        if self._send_many is not None:
            await self._send_many(batch)
            return
        assert self._send is not None
        for message in batch:
            await self._send(message)

    def _head_frames(self) -> Iterator[_Frame]:
        """The first `prebuffer` frames of the queue, in queue order."""
        return itertools.islice((item for item in self._queue if isinstance(item, _Frame)), self.prebuffer)

    def _encode_new_burst_now(self) -> None:
        """At a new burst, with nothing on the codec thread, encode the head frames on the loop:
        the first audio of a reply waits for no thread."""
        if self._burst_frames or self._encode_now is None or self._encoding:
            return
        for item in self._head_frames():
            if item.message is None:
                item.message = self._encode_now(item.pcm)

    def _encode_ahead(self) -> None:
        """Start encoding the head frames that are not yet encoding (in queue order: the
        encoder is stateful, and the codec thread runs jobs in order)."""
        assert self._encode_async is not None
        for item in self._head_frames():
            if item.encoding is None and item.message is None:
                self._encoding += 1
                item.encoding = asyncio.ensure_future(self._encode_async(item.pcm))
                item.encoding.add_done_callback(self._encoded)

    def _encoded(self, future: asyncio.Future[Message]) -> None:
        self._encoding -= 1
        _consume_result(future)

    def _delay_for_next_frame(self, frame: _Frame) -> float:
        now = self._clock()
        played_all = self._burst_start + self._burst_frames * self.frame_duration
        if self._burst_frames == 0 or now >= played_all:
            # The device has played everything: start a new burst with a fresh pre-buffer.
            if self._burst_frames and frame.queued_at < played_all:
                self.late_frames += 1
                if self._on_late_frame is not None:
                    self._on_late_frame()
            self._burst_start = now
            self._burst_frames = 0
            return 0.0
        # Frame k of a burst may leave once the device holds fewer than `prebuffer` frames
        # (with `batch`, up to `batch - 1` frame durations early, along with the frame due now).
        due = self._burst_start + (self._burst_frames - self.prebuffer + 1) * self.frame_duration
        delay = due - now
        return 0.0 if delay <= (self.batch - 1) * self.frame_duration + 1e-6 else delay

    async def _wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self._waiting_on_time = True
        try:
            await self._sleep(seconds)
        finally:
            self._waiting_on_time = False


def _consume_result(future: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned encoding's outcome (a frame dropped by clear() is never awaited)."""
    if not future.cancelled():
        future.exception()
