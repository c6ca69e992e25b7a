"""Uplink audio handled inline by the read worker (`XiaozhiConnection.handle_now`): the same
chunks, in the same order, as through the read loop; never ahead of a message still being handled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.chunk import AudioChunk, BaseChunk, Chunk, TurnStartChunk
from vixio.core.pipeline import Pipeline
from vixio.core.session import Session
from vixio.core.station import Station
from vixio.transports.xiaozhi.protocol import messages as xp
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder
from vixio.transports.xiaozhi.session.connection import XiaozhiConnection

pytestmark = pytest.mark.unit


class Held(Station):
    """Records what reaches it; holds each chunk until `release` is set."""

    handles = (BaseChunk,)

    def __init__(self) -> None:
        super().__init__("held")
        self.release = asyncio.Event()
        self.seen: list[Chunk] = []

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        await self.release.wait()
        self.seen.append(chunk)
        return
        yield


def audio_message(encoder: OpusEncoder, level: int) -> dict[str, object]:
    return {"type": xp.AUDIO, "data": encoder.encode(level.to_bytes(2, "little", signed=True) * 960)}


async def test_handle_now_keeps_order_and_leaves_audio_to_handle_while_it_is_busy_or_the_pipeline_full() -> None:
    station = Held()
    pipeline = Pipeline([station], session_id="s", queue_size=2)
    connection = XiaozhiConnection("s", "dev", XiaozhiConfig(), xp.XiaozhiProtocol(1), lambda m: asyncio.sleep(0))
    session = Session("s", pipeline, connection.on_output)
    await session.start()
    connection.attach(session)
    encoder = OpusEncoder(16000)
    try:
        assert connection.handle_now(audio_message(encoder, 100))  # not listening: dropped, like handle()
        assert connection.audio_frames_in == 0
        assert not connection.handle_now({"type": "listen", "state": "start", "mode": "auto"})  # not audio
        await connection.handle({"type": "listen", "state": "start", "mode": "auto"})

        assert connection.handle_now(audio_message(encoder, 100))
        await asyncio.sleep(0.01)  # the station takes it and holds it
        taken = 1
        while connection.handle_now(audio_message(encoder, 100 + taken)):
            taken += 1
        # One frame held by the station, two queued: then the pipeline is full and the frame is
        # left to handle() (which waits for room) without being decoded.
        assert taken == 3 and connection.audio_frames_in == 3

        # A push-to-talk start blocks in handle() on the full pipeline: audio behind it waits too.
        start = asyncio.create_task(connection.handle({"type": "listen", "state": "start", "mode": "manual"}))
        await asyncio.sleep(0.01)
        assert not start.done()
        station.release.set()
        assert not connection.handle_now(audio_message(encoder, 200))  # handle() still busy
        await start
        assert connection.handle_now(audio_message(encoder, 300))
        await pipeline.join()
        kinds = [type(c).__name__ for c in station.seen]
        assert kinds == ["AudioChunk"] * 3 + ["TurnStartChunk", "AudioChunk"]
        assert isinstance(station.seen[3], TurnStartChunk)
        assert all(isinstance(c, AudioChunk) and len(c.pcm) == 1920 for i, c in enumerate(station.seen) if i != 3)
    finally:
        await connection.close()
        await session.close()
