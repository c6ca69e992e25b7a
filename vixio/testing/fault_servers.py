"""A real OpenAI-compatible speech server on loopback (ASR and TTS) that can be told to misbehave.

Tests point `OpenAICompatibleASR` / `OpenAICompatibleTTS` at `server.base_url` and switch the
mode of each route to reproduce what broken providers do:

    async with SpeechFaultServer() as speech:
        speech.tts_mode = "http_500"      # every /audio/speech request fails
        ...
        speech.tts_mode = "ok"            # a tone of about 60 ms per character, int16 at 24 kHz

Modes: "ok", "http_500" (an OpenAI-style JSON error), "not_json" (HTTP 200 with a binary body
that is neither JSON nor UTF-8), "garbage" (HTTP 200 with random bytes as the audio).
"""

from __future__ import annotations

import json
import os
from typing import Literal, Self

import numpy as np
from aiohttp import web
from loguru import logger

SpeechMode = Literal["ok", "http_500", "not_json", "garbage"]

TTS_SAMPLE_RATE = 24000
_MS_PER_CHAR = 60
_MAX_SECONDS = 30  # a reply longer than this is cut: the server must stay bounded too


def tone_pcm(seconds: float, rate: int = TTS_SAMPLE_RATE, hz: float = 220.0) -> bytes:
    """A quiet sine tone as int16 mono PCM (clearly audio, clearly not noise)."""
    t = np.arange(int(seconds * rate)) / rate
    return (6000 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


class SpeechFaultServer:
    """`POST /v1/audio/transcriptions` and `POST /v1/audio/speech`, each in its own mode."""

    def __init__(self, *, transcript: str = "hello", host: str = "127.0.0.1") -> None:
        self._host = host
        self._port = 0
        self._runner: web.AppRunner | None = None
        self.transcript = transcript
        """What the ASR route answers in "ok" mode."""
        self.asr_mode: SpeechMode = "ok"
        self.tts_mode: SpeechMode = "ok"
        self.asr_requests = 0
        self.tts_requests: list[str] = []
        """The `input` text of every TTS request, in order."""

    async def start(self) -> Self:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speak)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        logger.debug("speech fault server listening on {}", self.base_url)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}/v1"

    async def _transcribe(self, request: web.Request) -> web.Response:
        await request.read()
        self.asr_requests += 1
        if self.asr_mode == "ok":
            return web.json_response({"text": self.transcript})
        return _fault(self.asr_mode)

    async def _speak(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "request body is not JSON"}}, status=400)
        text = str(body.get("input", ""))
        self.tts_requests.append(text)
        if self.tts_mode != "ok":
            return _fault(self.tts_mode)
        seconds = min(_MAX_SECONDS, len(text) * _MS_PER_CHAR / 1000)
        pcm = tone_pcm(seconds)
        response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        await response.prepare(request)
        for start in range(0, len(pcm), 9600):  # 200 ms per write, as streaming servers send
            await response.write(pcm[start : start + 9600])
        await response.write_eof()
        return response


def _fault(mode: SpeechMode) -> web.Response:
    if mode == "http_500":
        body = {"error": {"message": "scripted failure", "type": "server_error", "code": 500}}
        return web.Response(text=json.dumps(body), status=500, content_type="application/json")
    if mode == "not_json":
        return web.Response(body=b"\xff\xfe\x00<html>\x9c\x80 upstream proxy error", status=200,
                            content_type="text/html")
    return web.Response(body=os.urandom(48000), status=200, content_type="audio/pcm")
