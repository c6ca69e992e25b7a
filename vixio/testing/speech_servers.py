"""Local speech services that stream slowly, for TTS tests and latency measurements offline.

- `EdgeSpeechServer`: a WebSocket server speaking the Edge read-aloud protocol that the
  `edge-tts` package uses (speech.config, then SSML; turn.start, binary audio messages with
  a 2-byte header length, turn.end). It answers with real MP3 (PyAV's LAME encoder).
- `SlowSpeechServer`: an OpenAI-compatible `POST /audio/speech` that sends int16 PCM in
  pieces, one every `chunk_delay` seconds.

Both make audio with `tone_for(text)` unless given a `synthesize` callable: 150 ms of a
tone per character, so a test can check the length of what it heard. Each records the
requests it got and when it finished sending each answer (`finished_at`, `time.perf_counter`),
so a test can prove audio left before the server had sent the whole sentence.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import unescape

import numpy as np
from aiohttp import WSMsgType, web

from vixio.testing.loopback import LoopbackServer

Synthesize = Callable[[str], bytes]
"""Text → int16 mono PCM at 24 kHz."""

RATE = 24000
MS_PER_CHAR = 150
_HANG_SECONDS = 300  # "hang": longer than any client waits; stopping the server ends it sooner


def tone_for(text: str) -> bytes:
    """150 ms of a 300-700 Hz tone per character, a short fade at both ends."""
    samples = max(1, len(text.strip())) * RATE * MS_PER_CHAR // 1000
    pitch = 300 + (sum(map(ord, text)) % 400)
    t = np.arange(samples) / RATE
    wave = np.sin(2 * np.pi * pitch * t) * 9000
    fade = min(samples // 2, RATE // 100)
    ramp = np.linspace(0, 1, fade)
    wave[:fade] *= ramp
    wave[samples - fade :] *= ramp[::-1]
    return wave.astype("<i2").tobytes()


def encode_mp3(pcm: bytes, sample_rate: int = RATE, bit_rate: int = 48000) -> bytes:
    """int16 mono PCM → MP3 (CBR), as the Edge service sends it."""
    import av

    codec: Any = av.CodecContext.create("libmp3lame", "w")
    codec.sample_rate, codec.layout, codec.format, codec.bit_rate = sample_rate, "mono", "s16p", bit_rate
    samples = np.frombuffer(pcm, dtype="<i2")
    out = bytearray()
    step = 1152
    for start in range(0, len(samples), step):
        frame = av.AudioFrame.from_ndarray(samples[start : start + step].reshape(1, -1), format="s16p", layout="mono")
        frame.sample_rate = sample_rate
        for packet in codec.encode(frame):
            out += bytes(packet)
    for packet in codec.encode(None):
        out += bytes(packet)
    return bytes(out)


@dataclass(slots=True)
class SpeechRequest:
    """One request as the server understood it."""

    text: str
    voice: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    """Edge: rate, pitch, volume, output_format, query; OpenAI: the JSON body."""
    started_at: float = 0.0
    finished_at: float | None = None
    """When the last audio byte was handed to the socket (perf_counter)."""


class _Server(LoopbackServer):
    label = "speech test server"

    def __init__(self, *, chunk_delay: float, synthesize: Synthesize | None) -> None:
        super().__init__()
        self.chunk_delay = chunk_delay
        self.synthesize = synthesize or tone_for
        self.requests: list[SpeechRequest] = []

    @abstractmethod
    def _app(self) -> web.Application:
        """The aiohttp application with this server's routes."""

    def build_app(self) -> web.Application:
        return self._app()


_SSML_VOICE = re.compile(r"<voice name='([^']*)'>")
_SSML_PROSODY = re.compile(r"<prosody pitch='([^']*)' rate='([^']*)' volume='([^']*)'>(.*?)</prosody>", re.S)
_OUTPUT_FORMAT = re.compile(r'"outputFormat":"([^"]+)"')


class EdgeSpeechServer(_Server):
    """The Edge read-aloud WebSocket protocol on loopback; point `EdgeTTS(service_url=...)` at `url`."""

    def __init__(
        self,
        *,
        chunk_bytes: int = 600,
        chunk_delay: float = 0.0,
        synthesize: Synthesize | None = None,
        fail: str | None = None,
    ) -> None:
        """`chunk_bytes` of MP3 per binary message (600 B = 100 ms at 48 kbit/s); `fail`:
        "no_audio" ends the turn without audio, "close" drops the connection after turn.start,
        "reject" refuses the WebSocket handshake with HTTP 500, "hang" sends turn.start and then
        nothing (the connection stays open until the client gives up or the server stops)."""
        super().__init__(chunk_delay=chunk_delay, synthesize=synthesize)
        self.chunk_bytes = chunk_bytes
        self.fail = fail

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/consumer/speech/synthesize/readaloud/edge/v1?TrustedClientToken=test"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/consumer/speech/synthesize/readaloud/edge/v1", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.fail == "reject":
            return web.Response(status=500, text="service unavailable")
        ws = web.WebSocketResponse(compress=True)
        await ws.prepare(request)
        output_format = ""
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            headers, _, body = message.data.partition("\r\n\r\n")
            if "Path:speech.config" in headers:
                found = _OUTPUT_FORMAT.search(body)
                output_format = found.group(1) if found else ""
            elif "Path:ssml" in headers:
                request_id = re.search(r"X-RequestId:(\w+)", headers)
                await self._answer(
                    ws,
                    body,
                    request_id.group(1) if request_id else uuid.uuid4().hex,
                    {"output_format": output_format, "query": dict(request.query)},
                )
                if self.fail == "close":
                    break
        await ws.close()
        return ws

    async def _answer(self, ws: web.WebSocketResponse, ssml: str, request_id: str, params: dict[str, Any]) -> None:
        voice = _SSML_VOICE.search(ssml)
        prosody = _SSML_PROSODY.search(ssml)
        text = unescape(prosody.group(4)) if prosody else ""
        if prosody:
            params.update(pitch=prosody.group(1), rate=prosody.group(2), volume=prosody.group(3))
        record = SpeechRequest(
            text=text, voice=voice.group(1) if voice else "", params=params, started_at=time.perf_counter()
        )
        self.requests.append(record)
        await ws.send_str(_text_message(request_id, "turn.start", '{"context":{"serviceTag":"test"}}'))
        if self.fail == "close":
            return
        if self.fail == "hang":
            await asyncio.sleep(_HANG_SECONDS)
            return
        if self.fail != "no_audio":
            mp3 = encode_mp3(self.synthesize(text))
            for start in range(0, len(mp3), self.chunk_bytes):
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                await ws.send_bytes(_audio_message(request_id, mp3[start : start + self.chunk_bytes]))
            await ws.send_bytes(_audio_message(request_id, b"", content_type=None))
        record.finished_at = time.perf_counter()
        await ws.send_str(_text_message(request_id, "turn.end", "{}"))


def _text_message(request_id: str, path: str, body: str) -> str:
    return f"X-RequestId:{request_id}\r\nContent-Type:application/json; charset=utf-8\r\nPath:{path}\r\n\r\n{body}"


def _audio_message(request_id: str, data: bytes, content_type: str | None = "audio/mpeg") -> bytes:
    headers = f"X-RequestId:{request_id}\r\n"
    if content_type:
        headers += f"Content-Type:{content_type}\r\n"
    headers += "Path:audio\r\n"
    encoded = headers.encode()
    return len(encoded).to_bytes(2, "big") + encoded + data


class SlowSpeechServer(_Server):
    """OpenAI-compatible `POST /v1/audio/speech` sending PCM in slow pieces; `base_url` ends in /v1."""

    def __init__(
        self, *, chunk_bytes: int = 4800, chunk_delay: float = 0.0, synthesize: Synthesize | None = None
    ) -> None:
        """`chunk_bytes` of int16 PCM at 24 kHz per piece (4800 B = 100 ms), each after `chunk_delay` s."""
        super().__init__(chunk_delay=chunk_delay, synthesize=synthesize)
        self.chunk_bytes = chunk_bytes

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/audio/speech", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        record = SpeechRequest(
            text=str(body.get("input", "")),
            voice=str(body.get("voice", "")),
            params=body,
            started_at=time.perf_counter(),
        )
        self.requests.append(record)
        pcm = self.synthesize(record.text)
        response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        await response.prepare(request)
        for start in range(0, len(pcm), self.chunk_bytes):
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            await response.write(pcm[start : start + self.chunk_bytes])
        record.finished_at = time.perf_counter()
        await response.write_eof()
        return response
