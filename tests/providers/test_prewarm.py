"""Warm-ups (providers/prewarm.py) against a real HTTP server on loopback: the connection a cold
pool's warm-up opens is the one the next request uses; a warm pool sends nothing; a failed
warm-up stays quiet; the voice stack warms its APIs as a session starts and as its user speaks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from vixio.config.models import VixioConfig
from vixio.core.chunk import TurnStartChunk
from vixio.providers.agent.openai_agents.clients import close_openai_clients, warm_openai_client
from vixio.providers.asr.openai_compatible import OpenAICompatibleASR
from vixio.providers.prewarm import Warmth
from vixio.providers.tts.openai_compatible import OpenAICompatibleTTS
from vixio.stations.asr.station import ASRStation
from vixio.voice.stack import VoiceStack

pytestmark = pytest.mark.integration


class Recorder:
    """ASR, chat and TTS answering at once; every request is recorded as (method, path, the
    client's port): one port per connection."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> Recorder:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _any(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append((request.method, request.path, peer[1] if peer else 0))
        if request.method != "POST":  # as API servers answer a HEAD (aiohttp's own 405 has a body too)
            return web.Response(status=405, text="Method Not Allowed")
        await request.read()
        if request.path.endswith("/audio/transcriptions"):
            return web.json_response({"text": "hello"})
        if request.path.endswith("/audio/speech"):
            return web.Response(body=bytes(4800), content_type="audio/pcm")
        chunks = [
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            for delta, reason in (({"role": "assistant", "content": "Hi."}, None), ({}, "stop"))
        ]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return web.Response(body=body.encode(), content_type="text/event-stream")

    def methods(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path, _ in self.requests]

    def ports(self) -> set[int]:
        return {port for _, _, port in self.requests}


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    async with Recorder() as server:
        yield server


async def test_the_connection_a_warm_up_opens_carries_the_next_transcription(recorder: Recorder) -> None:
    asr = OpenAICompatibleASR(recorder.base_url, "k")
    try:
        await asr.warm()
        assert recorder.methods() == [("HEAD", "/v1/audio/transcriptions")]
        assert await asr.transcribe(bytes(3200), 16000) == "hello"
        # One connection: the transcription did not wait for one of its own.
        assert recorder.methods()[-1] == ("POST", "/v1/audio/transcriptions")
        assert len(recorder.ports()) == 1
        await asr.warm()  # used just now: warm, nothing sent
        assert len(recorder.requests) == 2
        assert asr.warmth.warmups == 1
    finally:
        await asr.close()


async def test_a_tts_warm_up_serves_the_next_synthesis(recorder: Recorder) -> None:
    tts = OpenAICompatibleTTS(recorder.base_url, "k")
    try:
        await tts.warm()
        audio = b"".join([chunk async for chunk in tts.synthesize("Hello there.")])
        assert len(audio) == 4800
        assert recorder.methods() == [("HEAD", "/v1/audio/speech"), ("POST", "/v1/audio/speech")]
        assert len(recorder.ports()) == 1
    finally:
        await tts.close()


async def test_the_agents_pool_is_warmed_for_its_chat_endpoint(recorder: Recorder) -> None:
    try:
        assert await warm_openai_client(recorder.base_url, "k", 30.0)
        assert not await warm_openai_client(recorder.base_url, "k", 30.0)  # warm: no second request
        from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

        agent = OpenAIAgentProvider("openai/m", api_base=recorder.base_url, api_key="k", timeout=30.0)
        await agent.initialize()
        text = "".join([getattr(event, "text", "") async for event in agent.chat("hi")])
        assert text == "Hi."
        assert recorder.methods() == [("HEAD", "/v1/chat/completions"), ("POST", "/v1/chat/completions")]
        assert len(recorder.ports()) == 1
    finally:
        await close_openai_clients()


async def test_a_warm_up_that_fails_is_quiet_and_not_retried_at_once(recorder: Recorder) -> None:
    warmth = Warmth("nowhere")

    async def refused() -> None:
        raise OSError("connection refused")

    assert await warmth.warm(refused)  # sent, failed, logged at DEBUG only
    assert not warmth.cold
    assert not await warmth.warm(refused)
    warmth._used_at = time.monotonic() - warmth.fresh_for  # as if 4 s went by
    assert warmth.cold


async def test_concurrent_warm_ups_of_one_pool_send_one_request(recorder: Recorder) -> None:
    asr = OpenAICompatibleASR(recorder.base_url, "k")
    try:
        await asyncio.gather(*(asr.warm() for _ in range(5)))
        assert recorder.methods() == [("HEAD", "/v1/audio/transcriptions")]
    finally:
        await asr.close()


def _config(recorder: Recorder, **pipeline: Any) -> VixioConfig:
    return VixioConfig.model_validate(
        {
            "vad": {"provider": "silero-onnx"},
            "asr": {"provider": "openai", "api_base": recorder.base_url, "api_key": "k"},
            "agent": {"provider": "litellm", "model": "openai/m", "api_key": "k", "api_base": recorder.base_url},
            "tts": {"provider": "openai", "api_base": recorder.base_url, "api_key": "k", "fallback": None},
            "memory": {"enabled": False},
            "pipeline": pipeline,
        }
    )


async def _requests_settle(recorder: Recorder, count: int) -> None:
    for _ in range(200):
        if len(recorder.requests) >= count:
            return
        await asyncio.sleep(0.01)


async def test_a_session_start_and_its_users_speech_warm_every_cloud_api(recorder: Recorder) -> None:
    stack = VoiceStack(_config(recorder))
    await stack.load()
    try:
        pipeline = stack.build_pipeline("s1")
        await _requests_settle(recorder, 3)
        assert sorted(recorder.methods()) == [
            ("HEAD", "/v1/audio/speech"),
            ("HEAD", "/v1/audio/transcriptions"),
            ("HEAD", "/v1/chat/completions"),
        ]
        asr_station = next(s for s in pipeline.stations if isinstance(s, ASRStation))
        # The user starts speaking a second later: the pools are warm, nothing is sent ...
        [_ async for _ in asr_station.process(TurnStartChunk(source="vad"))]
        await asyncio.sleep(0.1)
        assert len(recorder.requests) == 3
        # ... but after a silence longer than a pool stays warm, speech warms them again.
        for warmth in (stack.asr.warmth, stack.tts.warmth):  # type: ignore[union-attr]
            warmth._used_at -= warmth.fresh_for
        [_ async for _ in asr_station.process(TurnStartChunk(source="vad"))]
        await _requests_settle(recorder, 5)
        assert sorted(recorder.methods()[3:]) == [("HEAD", "/v1/audio/speech"), ("HEAD", "/v1/audio/transcriptions")]
    finally:
        await stack.close()


async def test_prewarm_off_sends_nothing_before_a_turn(recorder: Recorder) -> None:
    stack = VoiceStack(_config(recorder, prewarm=False))
    await stack.load()
    try:
        stack.build_pipeline("s1")
        await asyncio.sleep(0.2)
        assert recorder.requests == []
    finally:
        await stack.close()


async def test_closing_the_stack_cancels_a_warm_up_under_way() -> None:
    hung = asyncio.Event()

    async def hangs(request: web.Request) -> web.Response:
        hung.set()
        await asyncio.sleep(30)
        return web.Response(status=405, text="Method Not Allowed")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hangs)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        recorder = Recorder()
        recorder.port = port
        stack = VoiceStack(_config(recorder))
        await stack.load()
        stack.build_pipeline("s1")
        await asyncio.wait_for(hung.wait(), 5)
        started = time.monotonic()
        await stack.close()  # does not wait for the hanging HEADs' 10 s timeout
        assert time.monotonic() - started < 2
    finally:
        await runner.cleanup()
