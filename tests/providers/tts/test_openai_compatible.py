"""OpenAICompatibleTTS against a real aiohttp server on loopback that streams a generated sine."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web

from vixio.providers.tts import OpenAICompatibleTTS, TTSError
from vixio.providers.tts.openai_compatible import _PcmReframer, _WavStreamParser

pytestmark = pytest.mark.integration

RATE = 24000
TONE_HZ = 440.0
PIECE = 1001  # odd on purpose: the provider must realign to whole int16 samples


def sine_pcm(seconds: float, rate: int = RATE, channels: int = 1) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    mono = np.round(np.sin(2 * np.pi * TONE_HZ * t) * 0.3 * 32767).astype("<i2")
    return np.repeat(mono[:, None], channels, axis=1).tobytes()


def wav_header(rate: int, channels: int) -> bytes:
    # Streaming servers do not know the length: sizes are written as 0xFFFFFFFF.
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
    list_chunk = b"LIST" + struct.pack("<I", 5) + b"INFO\x00\x00"  # odd size, padded
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + list_chunk
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )


def dominant_hz(pcm: bytes, rate: int = RATE) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


@dataclass
class FakeSpeechServer:
    """Records every request; `/ok` streams a sine in odd-sized pieces, pausing after the first."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    release_rest: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    base: str = ""

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        return body

    async def ok(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        channels = 2 if body["response_format"] == "wav" else 1
        audio = sine_pcm(0.5, channels=channels)
        if body["response_format"] == "wav":
            audio = wav_header(RATE, channels) + audio
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        pieces = [audio[i : i + PIECE] for i in range(0, len(audio), PIECE)]
        await response.write(pieces[0] + pieces[1])  # enough for a first audio chunk even after a WAV header
        await asyncio.wait_for(self.release_rest.wait(), 5)
        for piece in pieces[2:]:
            await response.write(piece)
            await asyncio.sleep(0.001)  # separate TCP segments, so reads end on odd bytes
        await response.write_eof()
        return response

    async def endless(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            for _ in range(2000):  # 100 s of audio, far longer than the test waits
                await response.write(sine_pcm(0.05))
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        return response

    async def fail(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.Response(status=500, text="voice engine exploded: CUDA out of memory")

    async def slow(self, request: web.Request) -> web.Response:
        await self._record(request)
        await asyncio.sleep(3)
        return web.Response(body=sine_pcm(0.1))


@pytest.fixture
async def server() -> AsyncIterator[FakeSpeechServer]:
    fake = FakeSpeechServer()
    app = web.Application()
    for route in ("ok", "endless", "fail", "slow"):
        app.router.add_post(f"/{route}/v1/audio/speech", getattr(fake, route))
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.base = f"http://127.0.0.1:{port}"
    yield fake
    fake.release_rest.set()
    await runner.cleanup()


async def test_pcm_streams_before_the_body_ends_and_the_request_is_openai_shaped(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/ok/v1/", api_key="sk-test", model="tts-1-hd", voice="nova")
    assert tts.sample_rate == RATE
    stream = tts.synthesize("  Hello there.  ")
    # The server holds the rest of the body until it is told: a first chunk proves streaming.
    first = await asyncio.wait_for(anext(stream), 3)
    server.release_rest.set()
    rest = [chunk async for chunk in stream]
    await tts.close()

    assert server.requests == [
        {"model": "tts-1-hd", "input": "Hello there.", "voice": "nova", "response_format": "pcm"}
    ]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert "application/json" in server.headers[0]["Content-Type"]
    chunks = [first, *rest]
    assert all(len(chunk) % 2 == 0 for chunk in chunks)
    pcm = b"".join(chunks)
    assert pcm == sine_pcm(0.5)
    assert abs(dominant_hz(pcm) - TONE_HZ) < 5


async def test_wav_header_is_parsed_and_stereo_downmixed(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/ok/v1", response_format="wav")
    server.release_rest.set()
    pcm = b"".join([chunk async for chunk in tts.synthesize("Hi.")])
    await tts.close()
    assert server.requests[0]["response_format"] == "wav"
    assert "Authorization" not in server.headers[0]
    assert pcm == sine_pcm(0.5)  # stereo with equal channels downmixes to the mono sine exactly


async def test_wav_at_another_rate_is_refused_with_the_fix(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/ok/v1", response_format="wav", sample_rate=16000)
    server.release_rest.set()
    with pytest.raises(TTSError, match="24000 Hz.*sample_rate=24000"):
        async for _ in tts.synthesize("Hi."):
            pass
    await tts.close()


async def test_http_500_raises_with_status_and_body_excerpt(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/fail/v1")
    with pytest.raises(TTSError, match=r"HTTP 500.*voice engine exploded"):
        async for _ in tts.synthesize("Hello."):
            pass
    await tts.close()


async def test_a_server_that_stalls_raises_after_the_timeout(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/slow/v1", timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TTSError, match="stalled for more than 0.3 s"):
        async for _ in tts.synthesize("Hello."):
            pass
    assert loop.time() - started < 2
    await tts.close()


async def test_aclose_mid_stream_drops_the_connection(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/endless/v1")
    stream = tts.synthesize("A very long answer.")
    await anext(stream)
    await stream.aclose()
    await tts.close()
    await asyncio.wait_for(server.disconnected.wait(), 3)


async def test_blank_text_sends_nothing(server: FakeSpeechServer) -> None:
    tts = OpenAICompatibleTTS(f"{server.base}/ok/v1")
    assert [chunk async for chunk in tts.synthesize("  \n ")] == []
    assert server.requests == []
    await tts.close()


def test_bad_configuration_names_the_value() -> None:
    with pytest.raises(ValueError, match="'ftp://x'"):
        OpenAICompatibleTTS("ftp://x")
    with pytest.raises(ValueError, match="'mp3'"):
        OpenAICompatibleTTS("http://x", response_format="mp3")  # type: ignore[arg-type]


def test_wav_split_into_single_bytes_decodes_to_the_same_samples() -> None:
    body = wav_header(RATE, 2) + sine_pcm(0.05, channels=2)
    parser = _WavStreamParser("test", RATE)
    pcm = b"".join(parser.feed(body[i : i + 1]) for i in range(len(body)))
    assert pcm == sine_pcm(0.05)


def test_pcm_reads_ending_on_odd_bytes_are_realigned() -> None:
    reframer = _PcmReframer(1)
    source = sine_pcm(0.01)
    outputs = [reframer.feed(source[i : i + 3]) for i in range(0, len(source), 3)]
    assert all(len(out) % 2 == 0 for out in outputs)
    assert b"".join(outputs) == source
