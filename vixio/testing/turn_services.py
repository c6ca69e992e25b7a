"""Speech and chat services on loopback that answer what was actually said, for tests and
benchmarks of turn taking (preemptive turns, pauses mid-sentence).

`UtteranceServices` is one OpenAI-compatible aiohttp app:

- `POST /v1/audio/transcriptions` listens to the upload: it counts the stretches of speech in
  it (energy above `SPEECH_RMS`, split by `PAUSE_SECONDS` of quiet) and answers the words of
  that many parts of the utterance being spoken (`speak(...)` tells it which). A partial answer
  ends in "." as Whisper punctuates a cut-off sentence ("What is the weather in."), so a
  punctuation rule alone would take it for a whole sentence. It follows one device
  (`speak` before each utterance);
- `POST /v1/chat/completions` streams `answer(user_text)` (default: "The answer to <text>"), a
  word per SSE chunk, after `first_token_delay` seconds;
- `POST /v1/audio/speech` answers `tts_seconds` of tone after `first_audio_delay` seconds.

It records what it transcribed and what the model was asked, with times (`time.monotonic`).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from aiohttp import web

from vixio.testing.loopback import LoopbackServer

SPEECH_RMS = 400.0
"""int16 RMS of a 20 ms frame above which it counts as speech."""
PAUSE_SECONDS = 0.25
"""Quiet that separates two parts of an utterance (Piper's and espeak's word gaps are shorter)."""
TTS_RATE = 24000


@dataclass(frozen=True, slots=True)
class Utterance:
    """What a test or benchmark says: its parts, spoken with a pause between them."""

    parts: tuple[str, ...]

    @property
    def text(self) -> str:
        return _join(self.parts)

    def heard(self, parts: int) -> str:
        """The transcript of the first `parts` parts (a cut-off one ends in a period)."""
        if parts >= len(self.parts):
            return self.text
        words = _join(self.parts[:parts]).rstrip(".?!。？！")
        return words + ("。" if _is_cjk(words) else ".")


@dataclass(slots=True)
class Transcription:
    at: float
    speech_parts: int
    text: str


@dataclass(slots=True)
class ChatRequest:
    at: float
    user_text: str
    answered: bool = False
    """The stream was sent to its end (not cut off by a cancelled attempt)."""


def speech_stretches(pcm: bytes, rate: int) -> list[float]:
    """Seconds of each stretch of speech in int16 mono `pcm` (split by `PAUSE_SECONDS` of quiet)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32)
    frame = rate // 50
    count = len(samples) // frame
    if not count:
        return []
    rms = np.sqrt(np.mean(samples[: count * frame].reshape(count, frame) ** 2, axis=1))
    stretches: list[list[int]] = []
    quiet, needed = 10**9, int(PAUSE_SECONDS * 50)
    for index, is_loud in enumerate(rms > SPEECH_RMS):
        if is_loud:
            if quiet >= needed:
                stretches.append([index, index])
            stretches[-1][1] = index
            quiet = 0
        else:
            quiet += 1
    return [(last - first + 1) / 50 for first, last in stretches]


def speech_parts(pcm: bytes, rate: int) -> int:
    """Stretches of speech in int16 mono `pcm`, split by `PAUSE_SECONDS` of quiet."""
    return len(speech_stretches(pcm, rate))


class UtteranceServices(LoopbackServer):
    """ASR, chat and TTS that follow the utterance being spoken; see the module docstring."""

    label = "utterance services"

    def __init__(
        self,
        *,
        first_token_delay: float = 0.0,
        first_audio_delay: float = 0.0,
        tts_seconds: float = 1.0,
        answer: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__()
        self.first_token_delay = first_token_delay
        self.first_audio_delay = first_audio_delay
        self.tts_seconds = tts_seconds
        self.answer = answer or (lambda text: f"The answer to {text}")
        self.utterance: Utterance | None = None
        self.transcriptions: list[Transcription] = []
        self.chats: list[ChatRequest] = []
        self.speech_inputs: list[str] = []

    def speak(self, utterance: Utterance) -> None:
        """The utterance the device is about to say (what the ASR route transcribes)."""
        self.utterance = utterance

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/audio/speech", self._speech)
        return app

    async def _transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response({"error": {"message": "multipart field 'file' missing"}}, status=400)
        with wave.open(io.BytesIO(upload.file.read())) as wav:
            pcm, rate = wav.readframes(wav.getnframes()), wav.getframerate()
        parts = speech_parts(pcm, rate)
        text = self.utterance.heard(parts) if self.utterance is not None and parts else ""
        self.transcriptions.append(Transcription(time.monotonic(), parts, text))
        return web.json_response({"text": text})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        user_text = _content(users[-1]) if users else ""
        record = ChatRequest(time.monotonic(), user_text)
        self.chats.append(record)
        if self.first_token_delay:
            await asyncio.sleep(self.first_token_delay)
        envelope = {"id": f"chatcmpl-{len(self.chats)}", "created": int(time.time()), "model": body.get("model", "m")}
        words = self.answer(user_text).split(" ")
        deltas = [{"role": "assistant", "content": ""}] + [
            {"content": w + (" " if n < len(words) - 1 else "")} for n, w in enumerate(words)
        ]
        chunks = [
            {
                **envelope,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": d, "finish_reason": None}],
            }
            for d in deltas
        ]
        chunks.append(
            {
                **envelope,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
        )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await response.prepare(request)
            await response.write("".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:  # the client gave up (a cancelled preemptive attempt)
            return response
        record.answered = True
        return response

    async def _speech(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.speech_inputs.append(str(body.get("input", "")))
        if self.first_audio_delay:
            await asyncio.sleep(self.first_audio_delay)
        t = np.arange(int(self.tts_seconds * TTS_RATE)) / TTS_RATE
        pcm = (np.sin(2 * np.pi * 220 * t) * (0.55 + 0.45 * np.sin(2 * np.pi * 4 * t)) * 6000).astype("<i2")
        return web.Response(body=pcm.tobytes(), content_type="audio/pcm")


def _content(message: dict[str, object]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= char <= "\u9fff" for char in text)


def _join(parts: Sequence[str]) -> str:
    joined = ""
    for part in parts:
        joined += part if _is_cjk(part) or not joined else " " + part
    return joined


__all__ = ["ChatRequest", "Transcription", "Utterance", "UtteranceServices", "speech_parts", "speech_stretches"]
