"""OpenAICompatibleASR against a real aiohttp server on loopback that validates the upload."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from vixio.providers.asr import ASRError, OpenAICompatibleASR

pytestmark = pytest.mark.integration

web = pytest.importorskip("aiohttp.web")


@dataclass
class Upload:
    """What the server parsed out of one request."""

    fields: dict[str, str] = field(default_factory=dict)
    filename: str = ""
    content_type: str = ""
    channels: int = 0
    sample_width: int = 0
    rate: int = 0
    frames: bytes = b""
    authorization: str | None = None


@dataclass
class TranscriptionServer:
    """Parses multipart uploads like a real server would; behaviour chosen per test."""

    mode: str = "ok"
    uploads: list[Upload] = field(default_factory=list)
    base: str = ""
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        if self.mode == "error":
            return web.Response(status=500, text="model crashed: CUDA out of memory")
        if self.mode == "slow":
            await self.release.wait()  # answers only at teardown, long after the client gave up
        if self.mode == "not-json":
            return web.Response(text="<html>gateway</html>", content_type="text/html")
        upload = Upload(authorization=request.headers.get("Authorization"))
        reader = await request.multipart()
        async for part in reader:
            if part.filename is not None:
                upload.filename = part.filename
                upload.content_type = part.headers.get("Content-Type", "")
                data = await part.read()
                try:
                    with wave.open(io.BytesIO(data), "rb") as wav:
                        upload.channels = wav.getnchannels()
                        upload.sample_width = wav.getsampwidth()
                        upload.rate = wav.getframerate()
                        upload.frames = wav.readframes(wav.getnframes())
                except wave.Error as exc:
                    return web.json_response({"error": {"message": f"bad audio: {exc}"}}, status=400)
            else:
                upload.fields[part.name or ""] = await part.text()
        self.uploads.append(upload)
        if "model" not in upload.fields or not upload.frames:
            return web.json_response({"error": {"message": "missing model or file"}}, status=400)
        seconds = len(upload.frames) / 2 / upload.rate
        return web.json_response({"text": f"  {seconds:.2f} seconds at {upload.rate} hertz  "})


@pytest.fixture
async def server() -> AsyncIterator[TranscriptionServer]:
    state = TranscriptionServer()
    app = web.Application()
    app.router.add_post("/v1/audio/transcriptions", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{port}/v1"
    yield state
    state.release.set()
    await runner.cleanup()


def tone(seconds: float, rate: int) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()


async def test_uploads_a_valid_wav_with_fields(server: TranscriptionServer) -> None:
    asr = OpenAICompatibleASR(server.base + "/", api_key="sk-test", model="whisper-large-v3", language="zh")
    pcm = tone(1.5, 16000)
    try:
        text = await asr.transcribe(pcm, 16000)
        other = await asr.transcribe(tone(0.5, 24000), 24000, language="en")
    finally:
        await asr.close()
    assert text == "1.50 seconds at 16000 hertz"
    assert other == "0.50 seconds at 24000 hertz"
    first, second = server.uploads
    assert first.fields == {"model": "whisper-large-v3", "response_format": "json", "language": "zh"}
    assert (first.channels, first.sample_width, first.rate) == (1, 2, 16000)
    assert first.frames == pcm, "the WAV must carry the exact PCM"
    assert first.filename.endswith(".wav") and first.content_type == "audio/wav"
    assert first.authorization == "Bearer sk-test"
    assert (second.rate, second.fields["language"]) == (24000, "en")


async def test_no_language_and_no_key_sends_neither(server: TranscriptionServer) -> None:
    asr = OpenAICompatibleASR(server.base)
    try:
        await asr.transcribe(tone(0.2, 16000), 16000)
    finally:
        await asr.close()
    (upload,) = server.uploads
    assert "language" not in upload.fields
    assert upload.authorization is None


async def test_http_500_raises_with_status_and_body(server: TranscriptionServer) -> None:
    server.mode = "error"
    asr = OpenAICompatibleASR(server.base)
    try:
        with pytest.raises(ASRError, match=r"HTTP 500.*CUDA out of memory"):
            await asr.transcribe(tone(0.2, 16000), 16000)
    finally:
        await asr.close()


async def test_timeout_raises(server: TranscriptionServer) -> None:
    server.mode = "slow"
    asr = OpenAICompatibleASR(server.base, timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(ASRError, match=r"timed out after 0.3 s"):
            await asr.transcribe(tone(0.2, 16000), 16000)
    finally:
        await asr.close()
    assert loop.time() - started < 2


async def test_non_json_body_raises(server: TranscriptionServer) -> None:
    server.mode = "not-json"
    asr = OpenAICompatibleASR(server.base)
    try:
        with pytest.raises(ASRError, match="not JSON"):
            await asr.transcribe(tone(0.2, 16000), 16000)
    finally:
        await asr.close()


async def test_unreachable_server_raises() -> None:
    asr = OpenAICompatibleASR("http://127.0.0.1:9/v1", timeout=2)
    try:
        with pytest.raises(ASRError, match="failed"):
            await asr.transcribe(tone(0.2, 16000), 16000)
    finally:
        await asr.close()


async def test_empty_audio_skips_the_request(server: TranscriptionServer) -> None:
    asr = OpenAICompatibleASR(server.base)
    assert await asr.transcribe(b"", 16000) == ""
    await asr.close()
    assert server.uploads == []


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError, match="api_base"):
        OpenAICompatibleASR("api.openai.com/v1")
    with pytest.raises(ValueError, match="timeout"):
        OpenAICompatibleASR("http://localhost/v1", timeout=0)
