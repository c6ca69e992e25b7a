from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import numpy as np
import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.core.chunk import AudioChunk, Chunk, StreamCompleteChunk, TextChunk
from vixio.core.pipeline import Pipeline
from vixio.core.station import Station
from vixio.transports.xiaozhi.websocket.transport import DeviceContext


def tone(seconds: float, rate: int = 22050, freq: float = 440.0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * freq * t) * 8000).astype("<i2").tobytes()


class ToneReply(Station):
    """Answers every user text with a sentence and `seconds` of 22.05 kHz tone per 0.2 s chunk —
    the shape of a TTS station's output (text, then audio at the TTS rate, then complete)."""

    handles = (TextChunk,)

    def __init__(self, seconds: float = 1.0) -> None:
        super().__init__()
        self.seconds = seconds
        self.heard: list[str] = []

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        yield chunk
        if chunk.role != "user":
            return
        self.heard.append(chunk.text)
        yield TextChunk(text=f"You said: {chunk.text}", role="assistant")
        pcm = tone(self.seconds)
        step = int(0.2 * 22050) * 2
        for i in range(0, len(pcm), step):
            yield AudioChunk(pcm=pcm[i : i + step], sample_rate=22050, role="assistant")
        yield StreamCompleteChunk(source=self.name)


ServerFactory = Callable[..., Awaitable[VixioServer]]


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    servers: list[VixioServer] = []
    stations: list[ToneReply] = []

    async def make(reply_seconds: float = 1.0, **xiaozhi: object) -> VixioServer:
        config = VixioConfig.model_validate(
            {
                "xiaozhi": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "http": {"host": "127.0.0.1", "port": 0},
                    "idle_timeout": 0,
                    **xiaozhi,
                },
            }
        )

        async def factory(context: DeviceContext) -> Pipeline:
            station = ToneReply(reply_seconds)
            stations.append(station)
            return Pipeline([station], session_id=context.session_id)

        server = VixioServer(config, factory)
        server.stations = stations  # type: ignore[attr-defined]
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


def ws_url(server: VixioServer, path: str = "/xiaozhi/v1/") -> str:
    return f"ws://127.0.0.1:{server.transport.port}{path}"
