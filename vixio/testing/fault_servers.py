"""A real OpenAI-compatible speech server on loopback (ASR and TTS) that can be told to misbehave.

Tests point `OpenAICompatibleASR` / `OpenAICompatibleTTS` at `server.base_url` and switch the
mode of each route to reproduce what broken providers do:

    async with SpeechFaultServer() as speech:
        speech.tts_mode = "http_500"      # every /audio/speech request fails
        ...
        speech.tts_mode = "ok"            # a tone of about 60 ms per character, int16 at 24 kHz

Modes: "ok", "http_500" (an OpenAI-style JSON error), "http_401" (the same when a request
carries no valid key: OpenAI's "Incorrect API key provided"), "not_json" (HTTP 200 with a binary body
that is neither JSON nor UTF-8), "garbage" (HTTP 200 with random bytes as the audio), "hang"
(never answers: the request waits until the client gives up or the server stops), "stall" (TTS:
the first 0.4 s of audio, then nothing more while the connection stays open).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Literal

import numpy as np
from aiohttp import web

from vixio.testing.loopback import LoopbackServer

SpeechMode = Literal["ok", "http_500", "http_401", "not_json", "garbage", "hang", "stall"]

TTS_SAMPLE_RATE = 24000
_MS_PER_CHAR = 60
_MAX_SECONDS = 30  # a reply longer than this is cut: the server must stay bounded too
_HANG_SECONDS = 300  # "hang": longer than any client waits; stopping the server ends it sooner


def tone_pcm(seconds: float, rate: int = TTS_SAMPLE_RATE, hz: float = 220.0) -> bytes:
    """A quiet sine tone as int16 mono PCM (clearly audio, clearly not noise)."""
    t = np.arange(int(seconds * rate)) / rate
    return (6000 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


class SpeechFaultServer(LoopbackServer):
    """`POST /v1/audio/transcriptions` and `POST /v1/audio/speech`, each in its own mode."""

    label = "speech fault server"

    def __init__(self, *, transcript: str = "hello", host: str = "127.0.0.1") -> None:
        super().__init__(host=host)
        self.transcript = transcript
        """What the ASR route answers in "ok" mode."""
        self.asr_mode: SpeechMode = "ok"
        self.tts_mode: SpeechMode = "ok"
        self.asr_requests = 0
        self.tts_requests: list[str] = []
        """The `input` text of every TTS request, in order."""

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speak)
        return app

    async def _transcribe(self, request: web.Request) -> web.Response:
        await request.read()
        self.asr_requests += 1
        if self.asr_mode == "ok":
            return web.json_response({"text": self.transcript})
        if self.asr_mode in ("hang", "stall"):
            await asyncio.sleep(_HANG_SECONDS)
        return _fault(self.asr_mode)

    async def _speak(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "request body is not JSON"}}, status=400)
        text = str(body.get("input", ""))
        self.tts_requests.append(text)
        mode = self.tts_mode
        if mode == "hang":
            await asyncio.sleep(_HANG_SECONDS)
        if mode not in ("ok", "stall"):
            return _fault(mode)
        seconds = min(_MAX_SECONDS, len(text) * _MS_PER_CHAR / 1000)
        pcm = tone_pcm(seconds)
        response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        await response.prepare(request)
        for start in range(0, len(pcm), 9600):  # 200 ms per write, as streaming servers send
            await response.write(pcm[start : start + 9600])
            if mode == "stall" and start >= 9600:
                await asyncio.sleep(_HANG_SECONDS)
        await response.write_eof()
        return response


def _fault(mode: SpeechMode) -> web.Response:
    if mode == "http_500":
        body = {"error": {"message": "scripted failure", "type": "server_error", "code": 500}}
        return web.Response(text=json.dumps(body), status=500, content_type="application/json")
    if mode == "http_401":
        body = {
            "error": {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
        return web.Response(text=json.dumps(body), status=401, content_type="application/json")
    if mode == "not_json":
        return web.Response(
            body=b"\xff\xfe\x00<html>\x9c\x80 upstream proxy error", status=200, content_type="text/html"
        )
    return web.Response(body=os.urandom(48000), status=200, content_type="audio/pcm")
