"""Instant OpenAI-compatible ASR, LLM and TTS servers for bench/bench_capacity.py.

One aiohttp app on loopback answering any number of requests at once, so a benchmark times
only the voice server's own work:

- `POST /v1/audio/transcriptions` (multipart, as `provider: openai` ASR sends it): reads the
  upload and answers `{"text": <question>}`;
- `POST /v1/chat/completions` (as litellm's `openai/...` models send it): streams the answer
  as SSE chunks, a word per chunk (or one JSON completion when `stream` is false);
- `POST /v1/audio/speech`: `seconds` of int16 mono 24 kHz audio (a voiced, syllable-shaped
  tone), as raw PCM or WAV per `response_format`, in one response body;
- `GET /stats`: how many requests each route answered, and the rejected ones.

`--first-token-ms` holds each model answer that long before its first chunk and
`--first-audio-ms` each speech body before its first byte: `PROVIDER_PAIRS["slow"]` is the
300 ms / 150 ms pair bench/bench_latency.py also measures, as remote services answer.

Run on its own: `python bench/capacity/fakes.py [--port 0]` prints one JSON line
`{"port": ...}` when it listens, then serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import Counter
from contextlib import suppress

import numpy as np
from aiohttp import BodyPartReader, web

from vixio.providers.asr.openai_compatible import pcm_to_wav

QUESTION = "What is the weather today?"
ANSWER = "It is sunny and twenty degrees today."
TTS_SAMPLE_RATE = 24000
PROVIDER_PAIRS = {"zero": (0.0, 0.0), "slow": (0.300, 0.150)}
"""Seconds to the model's first token and to the first TTS audio, per provider pair."""


def speech_like_pcm(seconds: float, sample_rate: int = TTS_SAMPLE_RATE) -> bytes:
    """A voiced sound shaped into ~4 syllables a second (not silence, so Opus spends real bits)."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    pitch = 140 + 25 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = np.sin(phase) + 0.5 * np.sin(2 * phase) + 0.25 * np.sin(3 * phase)
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * t)
    return (voice * envelope * 5000).astype("<i2").tobytes()


class InstantSpeechServices:
    """The three endpoints; `stats` counts answered requests per route."""

    def __init__(
        self,
        *,
        question: str = QUESTION,
        answer: str = ANSWER,
        tts_seconds: float = 1.5,
        first_token_delay: float = 0.0,
        first_audio_delay: float = 0.0,
    ) -> None:
        self.question = question
        self.answer = answer
        self.first_token_delay = first_token_delay
        self.first_audio_delay = first_audio_delay
        self.pcm = speech_like_pcm(tts_seconds)
        self.wav = pcm_to_wav(self.pcm, TTS_SAMPLE_RATE)
        self.stats: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_get("/stats", self._stats)
        for path in ("/v1/audio/transcriptions", "/v1/chat/completions", "/v1/audio/speech"):
            app.router.add_route("HEAD", path, self._head)  # vixio's warm-ups (providers/prewarm.py)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, backlog=1024).start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- routes ---------------------------------------------------------------------------------

    async def _transcribe(self, request: web.Request) -> web.Response:
        # The parts are read as they stream in. `request.post()` spools an upload to a temporary
        # file: 1.0 ms of this process's CPU per 2 s WAV against 0.4 streamed (measured), taken
        # from the two cores the server under test shares with it, all during the turns' burst.
        uploaded = False
        reader = await request.multipart() if request.content_type == "multipart/form-data" else None
        while reader is not None and (part := await reader.next()) is not None:
            if isinstance(part, BodyPartReader) and part.name == "file" and part.filename:
                while await part.read_chunk(2**16):
                    pass
                uploaded = True
            else:
                await part.release()
        if not uploaded:
            self.stats["rejected"] += 1
            return web.json_response({"error": {"message": "multipart field 'file' missing"}}, status=400)
        self.stats["transcriptions"] += 1
        return web.json_response({"text": self.question})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.stats["chat"] += 1
        envelope = {
            "id": f"chatcmpl-bench-{self.stats['chat']}",
            "created": int(time.time()),
            "model": body.get("model", "bench"),
        }
        if self.first_token_delay:
            await asyncio.sleep(self.first_token_delay)
        if not body.get("stream"):
            message = {"role": "assistant", "content": self.answer}
            return web.json_response(
                {
                    **envelope,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
                }
            )
        deltas = [{"role": "assistant", "content": ""}] + [{"content": w} for w in _words(self.answer)]
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
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(
                {
                    **envelope,
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
                }
            )
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(data.encode())
        await response.write_eof()
        return response

    async def _speech(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not str(body.get("input") or "").strip():
            self.stats["rejected"] += 1
            return web.json_response({"error": {"message": "input is empty"}}, status=400)
        self.stats["speech"] += 1
        if self.first_audio_delay:
            await asyncio.sleep(self.first_audio_delay)
        if body.get("response_format") == "wav":
            return web.Response(body=self.wav, content_type="audio/wav")
        return web.Response(body=self.pcm, content_type="audio/pcm")

    async def _head(self, request: web.Request) -> web.Response:
        self.stats["warmups"] += 1
        return web.Response(status=405, text="Method Not Allowed")

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.stats))

    async def _unknown(self, request: web.Request) -> web.Response:
        self.stats["unknown"] += 1
        return web.json_response({"error": {"message": f"no route {request.method} {request.path}"}}, status=404)


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + words[-1:]


async def _main(args: argparse.Namespace) -> None:
    services = InstantSpeechServices(
        tts_seconds=args.tts_seconds,
        first_token_delay=args.first_token_ms / 1000,
        first_audio_delay=args.first_audio_ms / 1000,
    )
    port = await services.start(port=args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(json.dumps({"port": port}), flush=True)
    try:
        await stop.wait()
    finally:
        with suppress(Exception):
            await services.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tts-seconds", type=float, default=1.5, help="audio per /audio/speech request")
    parser.add_argument("--first-token-ms", type=float, default=0.0, help="wait before each model answer's first chunk")
    parser.add_argument("--first-audio-ms", type=float, default=0.0, help="wait before each speech body")
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
