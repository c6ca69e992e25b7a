"""Streamed TTS reaches the device while the speech service is still sending the sentence.

A real VixioServer (Xiaozhi WebSocket, paced Opus downlink) whose TTS is Edge or an
OpenAI-compatible API, each pointed at a local server that sends 100 ms of audio every 100 ms
(`vixio.testing.speech_servers`). The simulated device's wake word makes the server speak the
greeting; the first Opus frame must reach the device long before the service finishes it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.speech_servers import EdgeSpeechServer, SlowSpeechServer

pytestmark = pytest.mark.integration

GREETING = "你好，我是小智，今天有什么可以帮你的吗？"  # 20 characters: 3 s of audio, sent over 3 s


async def first_frame_and_finish(
    tts: dict[str, Any], server: EdgeSpeechServer | SlowSpeechServer
) -> tuple[float, float]:
    config = VixioConfig.model_validate(
        {
            "language": "zh",
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "http": {"host": "127.0.0.1", "port": 0},
                "idle_timeout": 0,
                "greeting": GREETING,
            },
            "tts": tts,
        }
    )
    vixio = VixioServer(config)
    await vixio.start()
    try:
        async with SimulatedDevice(
            ws_url=f"ws://127.0.0.1:{vixio.transport.port}/xiaozhi/v1/", clock=time.perf_counter
        ) as device:
            await device.connect()
            mark = device.mark()
            await device.wake_word()
            start = await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            assert start["text"] == GREETING
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            frames = [frame for frame in device.audio_frames if frame.time >= start_time(device, mark)]
            assert len(frames) > 30 and device.drop_counts() == {}
    finally:
        await vixio.stop()
    (request,) = server.requests
    assert request.text == GREETING and request.finished_at is not None
    return frames[0].time, request.finished_at


def start_time(device: SimulatedDevice, mark: int) -> float:
    return device.received[mark].time if len(device.received) > mark else 0.0


async def test_edge_tts_first_downlink_frame_leaves_before_the_sentence_is_sent() -> None:
    pytest.importorskip("edge_tts")
    async with EdgeSpeechServer(chunk_delay=0.1) as server:
        first, finished = await first_frame_and_finish({"provider": "edge", "service_url": server.url}, server)
    assert finished - first > 1.5, f"first frame only {finished - first:.2f} s before the service finished"


async def test_openai_compatible_pcm_first_downlink_frame_leaves_before_the_sentence_is_sent() -> None:
    async with SlowSpeechServer(chunk_delay=0.1) as server:
        tts = {
            "provider": "openai",
            "api_base": server.base_url,
            "model": "FunAudioLLM/CosyVoice2-0.5B",
            "voice": "FunAudioLLM/CosyVoice2-0.5B:alex",
            "response_format": "pcm",
            "sample_rate": 24000,
            "extra_body": {"sample_rate": 24000, "stream": True},
        }
        first, finished = await first_frame_and_finish(tts, server)
    assert finished - first > 1.5, f"first frame only {finished - first:.2f} s before the service finished"
    (request,) = server.requests
    assert request.params["response_format"] == "pcm"
    assert request.params["sample_rate"] == 24000 and request.params["stream"] is True
