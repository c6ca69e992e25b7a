"""Server → device: the session's output chunks become messages and paced audio.

User text becomes `stt`; assistant text becomes `tts sentence_start`; assistant audio is cut
into 60 ms frames at 24 kHz, Opus-encoded and paced (pacing.py); the end of a reply becomes
`tts stop` once the device has played it; an interrupt drops unsent audio and stops at once;
speech over the reply pauses it (`control`: `tts stop`, the rest held) until the VAD station
says it was a barge-in (an interrupt) or not (`tts start`, the rest goes on). v2 frames carry
the downlink clock in ms, which a `features.aec` device echoes back in its uplink stamps.
One `Downlink` per `XiaozhiConnection`, which it reads for the session, the protocol, the
socket write and the idle clock.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from vixio.core.chunk import (
    AudioChunk,
    Chunk,
    EmotionChunk,
    InterruptChunk,
    StreamCompleteChunk,
    TextChunk,
    VADStartChunk,
)
from vixio.core.eager import eager_task
from vixio.core.protocol import Message
from vixio.metrics import LATE_FRAMES, reply_ended
from vixio.metrics.instruments import TurnOutcome
from vixio.transports.xiaozhi.protocol import messages as xp
from vixio.transports.xiaozhi.protocol.codec import DOWNLINK_SAMPLE_RATE, FRAME_DURATION_MS, OpusEncoder, ReplyFramer
from vixio.transports.xiaozhi.session.pacing import DownlinkPacer

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.aec.canceller import SessionEchoCanceller
    from vixio.transports.xiaozhi.session.connection import XiaozhiConnection

PACED_FRAMES_PER_WAKEUP = 4
"""Downlink frames the pacer sends per wake-up once the pre-buffer is out (see pacing.py): the
device holds 5-8 frames (0.3-0.48 s) instead of 5-6 with 2. Against 2, 3.6 % less server CPU per
frame at 100 devices (three paired runs) and more lead when the loop is late; the price is up to
120 ms more of the old reply heard after a barge-in (the firmware plays what it queued after
`tts stop`)."""
DOWNLINK_FRAME_BYTES = DOWNLINK_SAMPLE_RATE * FRAME_DURATION_MS // 1000 * 2
"""Bytes of one downlink frame of mono int16 PCM: what the encoder takes."""
SAY_SOURCE = "say:"
"""The `StreamCompleteChunk.source` that ends a `say` whose delivery someone waits for (+ a token)."""
DOWNLINK_AHEAD_S = 2.0
"""Audio queued for the device beyond which the output waits (the device holds its own small buffer)."""


def to_reference_rate(pcm: bytes) -> np.ndarray:
    """A 24 kHz downlink frame as 16 kHz int16 for the echo reference (linear interpolation: the
    canceller needs the echo's shape, not hi-fi; exactly 2 samples per 3, so frames stay whole)."""
    x = np.frombuffer(pcm, dtype="<i2")
    n = len(x) * 2 // 3
    return np.interp(np.arange(n) * 1.5, np.arange(len(x)), x).astype(np.int16)


class Downlink:
    """What one connection sends its device: replies, paced."""

    def __init__(self, connection: XiaozhiConnection, *, encode_on_thread: bool) -> None:
        self.connection = connection
        self.speaking = False
        """A reply is being sent (from its first message to `tts stop`)."""
        # libopus' encoder state (~38 KB) is made at the first reply frame.
        self._encoder: OpusEncoder | None = None
        self._framer = ReplyFramer(DOWNLINK_FRAME_BYTES)
        self._reply_turn = 0
        self.paused = False
        """Speech over the reply paused it (`pause`): `tts stop` was sent, the rest waits."""
        self._stamp_ms = 0
        self.echo: SessionEchoCanceller | None = None
        """The device's echo canceller (hello `features.aec`): told every frame sent, as 16 kHz."""
        # Opus encode (~70 us a frame at complexity 1) on the codec thread runs beside the loop, but
        # the round trip costs ~100 us more CPU a frame: it pays only with a core to spare.
        encoding = (
            dict(encode_async=self._encode_frame_async, encode_now=self._encode_frame)
            if encode_on_thread
            else dict(encode=self._encode_frame)
        )
        self._said: dict[str, tuple[asyncio.Future[bool], int]] = {}
        """`say_delivered` waits: token -> (its outcome, `sentences_sent` when it began)."""
        self.sentences_sent = 0
        """`tts sentence_start` messages written to the device."""
        self.pacer = DownlinkPacer(
            send_many=self._send_paced,
            frame_duration=FRAME_DURATION_MS / 1000,
            prebuffer=connection.config.prebuffer_frames,
            batch=PACED_FRAMES_PER_WAKEUP,
            on_late_frame=LATE_FRAMES.inc,
            **encoding,
        )

    async def on_output(self, chunk: Chunk) -> None:
        """The session's output handler: pipeline chunks → messages and paced audio."""
        if self.connection.stopping:
            return
        if isinstance(chunk, InterruptChunk):
            if self.pacer.pending or self.speaking:
                await self.stop()
            self._set_bot_speaking(False)
        elif isinstance(chunk, AudioChunk):
            if chunk.role != "assistant":
                return  # microphone audio no station consumed: never echo it back
            self._start_speaking(chunk.turn_id)
            self._send_frames(self._framer.push(chunk))
            self.pacer.kick()  # the reply's first audio leaves now, not at the pacer's wake-up
            await self._wait_for_room(chunk)
        elif isinstance(chunk, TextChunk):
            messages = self.connection.protocol.chunk_to_messages(chunk)
            if chunk.role == "user":
                self.connection.touch()
                await self.connection.write(messages)
            elif messages:
                self._start_speaking(chunk.turn_id)
                for message in messages:
                    self.pacer.send_message(message)
                self.pacer.kick()
        elif isinstance(chunk, EmotionChunk):
            self._start_speaking(chunk.turn_id)
            self.pacer.send_message(
                xp.llm_emotion(chunk.emotion, chunk.emoji)
                if chunk.emotion in xp.EMOTIONS
                else xp.llm_emotion("neutral", chunk.emoji)
            )
            self.pacer.kick()
        elif isinstance(chunk, StreamCompleteChunk):
            token = chunk.source.removeprefix(SAY_SOURCE) if chunk.source.startswith(SAY_SOURCE) else ""
            if self.speaking:
                self._send_frames(self._framer.flush())
                self.pacer.end(self._finish_reply if not token else partial(self._finish_said, token))
            elif token:
                self.settle_said(token, False)  # nothing of it was sent (no speakable text)
        elif isinstance(chunk, VADStartChunk):
            self.connection.touch()

    def expect_said(self, token: str) -> asyncio.Future[bool]:
        """The outcome of a `say` whose stream ends with `StreamCompleteChunk(source=SAY_SOURCE +
        token)`: True once the reply it is part of was sent to its end, or was interrupted after
        one of its sentences went out; False when the connection closes first (`abandon_said`)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._said[token] = (future, self.sentences_sent)
        return future

    def settle_said(self, token: str, delivered: bool) -> None:
        future, _ = self._said.pop(token, (None, 0))
        if future is not None and not future.done():
            future.set_result(delivered)

    def abandon_said(self) -> None:
        """The connection closed: what was not sent yet never will be."""
        for token in list(self._said):
            self.settle_said(token, False)

    async def _finish_said(self, token: str) -> None:
        delivered = False
        try:
            await self._finish_reply()
            delivered = True  # its `tts stop` was written: the device has it all
        finally:  # a write that failed (the device hung up at that moment): not delivered
            self.settle_said(token, delivered)

    async def _wait_for_room(self, chunk: AudioChunk) -> None:
        """Backpressure: while more than `DOWNLINK_AHEAD_S` of audio waits for the device, the
        session's output pump waits here, so the pipeline's bounded queues fill and the TTS
        (and the agent behind it) pause instead of synthesising the whole reply into memory.
        An abort or barge-in (the chunk's turn goes stale) ends the wait at once."""
        limit = int(DOWNLINK_AHEAD_S * 1000 / FRAME_DURATION_MS)
        pipeline = self.connection.session.pipeline if self.connection.session is not None else None
        while self.speaking and self.pacer.pending > limit and not (pipeline and pipeline.is_stale(chunk)):
            await asyncio.sleep(FRAME_DURATION_MS / 1000)

    def _start_speaking(self, turn_id: int = 0) -> None:
        if not self.speaking:
            self.speaking = True
            self._reply_turn = turn_id
            self.connection.touch()
            self._set_bot_speaking(True)
            if self.connection.session is not None:
                self.connection.session.state.heard.clear()
                self.connection.session.state.reply_control = self.control
            self.pacer.send_message(xp.tts("start"))

    def _set_bot_speaking(self, value: bool) -> None:
        if self.connection.session is not None:
            self.connection.session.state.bot_speaking = value

    async def _send_paced(self, messages: list[Message]) -> None:
        """What the pacer sends (in one write): also notes what the device has been given to play."""
        if self.connection.session is not None:
            for message in messages:
                if message.get("type") == xp.AUDIO:
                    self.connection.session.state.metrics(self._reply_turn).mark("first_frame_sent")
                elif message.get("state") == "sentence_start":
                    self.connection.session.state.hear(message.get("text", ""))
        await self.connection.write(messages)
        self.sentences_sent += sum(1 for message in messages if message.get("state") == "sentence_start")

    def _send_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.pacer.send_frame(frame)

    @property
    def encoder(self) -> OpusEncoder:
        """The downlink encoder, made at the first reply frame."""
        if self._encoder is None:
            self._encoder = OpusEncoder(
                DOWNLINK_SAMPLE_RATE,
                frame_duration_ms=FRAME_DURATION_MS,
                complexity=self.connection.config.opus_complexity,
            )
        return self._encoder

    def _encode_frame(self, pcm: bytes) -> Message:
        stamp = self._stamp(pcm)
        return xp.audio(self.encoder.encode(pcm), stamp)

    async def _encode_frame_async(self, pcm: bytes) -> Message:
        stamp = self._stamp(pcm)  # before the await: frames are stamped in queue order
        return xp.audio(await self.encoder.encode_async(pcm), stamp)

    def _stamp(self, pcm: bytes) -> int:
        """The frame's v2 timestamp: the downlink clock in ms (never 0: the firmware queues only
        non-zero stamps for its uplink), wrapping like the header's uint32."""
        self._stamp_ms = (
            self._stamp_ms + FRAME_DURATION_MS if self._stamp_ms < 0xFFFFFFFF - FRAME_DURATION_MS else FRAME_DURATION_MS
        )
        if self.echo is not None:
            self.echo.sent(self._stamp_ms, to_reference_rate(pcm))
        return self._stamp_ms

    async def _write_now(self, messages: list[Any]) -> None:
        await self.connection.write(messages)

    def control(self, action: str) -> None:
        """The VAD station's verdict on speech over the reply (`SessionState.reply_control`)."""
        if action == "pause" and self.speaking and not self.paused:
            self.paused = True
            self.pacer.hold()
            eager_task(self._write_now([xp.tts("stop")]), name="vixio-downlink-pause")
        elif action == "resume" and self.paused:
            self.paused = False
            if self.speaking:
                # `tts start` first: the device plays binary audio only while speaking.
                eager_task(self._resume(), name="vixio-downlink-resume")

    async def _resume(self) -> None:
        await self.connection.write([xp.tts("start")])
        self.pacer.release()

    async def stop(self) -> int:
        """Drop unsent audio and tell the device to stop at once; returns the frames dropped."""
        dropped = self.pacer.clear()
        # A `say` cut off here by the user speaking over it was heard if one of its sentences went
        # out; one cut off by the server stopping was not.
        for token, (_, sent_before) in list(self._said.items()):
            self.settle_said(token, self.sentences_sent > sent_before and not self.connection.stopping)
        self.paused = False
        self._framer.clear()
        if self.speaking:
            self._count_reply("interrupted")
        self.speaking = False
        await self.connection.write([xp.tts("stop")])
        return dropped

    async def _finish_reply(self) -> None:
        if self.speaking:
            self.speaking = False
            self.connection.touch()
            await self.connection.write([xp.tts("stop")])
            self._set_bot_speaking(False)
            self._count_reply("answered")
            if self.connection.session is not None:
                metrics = self.connection.session.state.metrics(self._reply_turn)
                timings = metrics.durations()
                if timings:
                    # The marks end the line as one literal (benchmarks parse it); the notes go before.
                    self.connection.logger.info(
                        "turn {}{} latency (ms from first mark): {}",
                        self._reply_turn,
                        f" {metrics.notes}" if metrics.notes else "",
                        timings,
                    )

    def _count_reply(self, outcome: TurnOutcome) -> None:
        marks = (
            self.connection.session.state.metrics(self._reply_turn).marks if self.connection.session is not None else {}
        )
        reply_ended(marks, outcome)
