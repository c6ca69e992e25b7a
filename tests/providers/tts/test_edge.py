"""EdgeTTS against a local WebSocket server speaking the Edge read-aloud protocol (real MP3)."""

from __future__ import annotations

import asyncio
import random
import time

import numpy as np
import pytest

pytest.importorskip("edge_tts")
pytest.importorskip("av")

from vixio.config import parse_config  # noqa: E402
from vixio.providers.tts.base import TTSError  # noqa: E402
from vixio.providers.tts.edge import EdgeTTS  # noqa: E402
from vixio.providers.tts.mp3 import Mp3StreamDecoder  # noqa: E402
from vixio.testing.speech_servers import MS_PER_CHAR, EdgeSpeechServer, encode_mp3, tone_for  # noqa: E402
from vixio.voice.providers import make_tts as _tts  # noqa: E402

pytestmark = pytest.mark.integration


async def collect(tts: EdgeTTS, text: str) -> tuple[bytes, float]:
    """All PCM, and the time of the first chunk (perf_counter)."""
    chunks, first = [], 0.0
    async for pcm in tts.synthesize(text):
        first = first or time.perf_counter()
        chunks.append(pcm)
    return b"".join(chunks), first


async def test_voice_rate_and_pitch_reach_the_service_and_the_mp3_decodes_to_the_sentence() -> None:
    async with EdgeSpeechServer() as server:
        tts = EdgeTTS("zh-CN-YunxiNeural", rate="+10%", pitch="-5Hz", volume="-20%", service_url=server.url)
        pcm, _ = await collect(tts, "你好，今天天气很好。")
    (request,) = server.requests
    assert request.text == "你好，今天天气很好。"
    assert "zh-CN, YunxiNeural" in request.voice
    assert (request.params["rate"], request.params["pitch"], request.params["volume"]) == ("+10%", "-5Hz", "-20%")
    assert request.params["output_format"] == "audio-24khz-48kbitrate-mono-mp3"
    assert request.params["query"]["Sec-MS-GEC"] and request.params["query"]["ConnectionId"]
    seconds = len(pcm) / 2 / tts.sample_rate
    expected = len("你好，今天天气很好。") * MS_PER_CHAR / 1000
    assert abs(seconds - expected) < 0.1, seconds  # MP3 adds at most a frame or two of padding
    heard = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    assert heard.std() > 3000  # the tone, not silence


async def test_audio_is_yielded_while_the_service_is_still_sending() -> None:
    async with EdgeSpeechServer(chunk_delay=0.1) as server:  # 100 ms of MP3 every 100 ms
        tts = EdgeTTS(service_url=server.url)
        await tts.initialize()
        _, first = await collect(tts, "这是一个比较长的句子，用来测试流式播放。")
    (request,) = server.requests
    assert request.finished_at is not None
    assert request.finished_at - first > 1.0, "the first audio came only after the whole sentence"


@pytest.mark.parametrize("fail", ["no_audio", "close", "reject"])
async def test_service_failures_raise_tts_errors(fail: str) -> None:
    async with EdgeSpeechServer(fail=fail) as server:
        tts = EdgeTTS(service_url=server.url)
        with pytest.raises(TTSError, match="edge: voice"):
            await collect(tts, "你好。")


async def test_nothing_listening_raises_a_tts_error() -> None:
    tts = EdgeTTS(service_url="ws://127.0.0.1:9/edge/v1?TrustedClientToken=x", timeout=2)
    with pytest.raises(TTSError, match="connection refused at 127.0.0.1:9$"):
        await collect(tts, "你好。")


async def test_bad_prosody_is_refused_before_any_request() -> None:
    with pytest.raises(ValueError, match="rate"):
        await EdgeTTS(rate="fast").initialize()
    errors = []
    try:
        parse_config({"tts": {"provider": "edge", "pitch": "high"}}, environ={})
    except Exception as exc:  # noqa: BLE001
        errors = exc.errors  # type: ignore[attr-defined]
    assert errors and errors[0].startswith("tts.edge.pitch:")


def test_config_builds_the_provider_with_the_language_voice() -> None:
    config = parse_config({"language": "zh", "tts": {"provider": "edge", "rate": "-10%"}}, environ={})
    tts = _tts(config.tts)
    assert isinstance(tts, EdgeTTS)
    assert (tts.voice, tts.rate, tts.sample_rate) == ("zh-CN-XiaoxiaoNeural", "-10%", 24000)


def test_mp3_decodes_the_same_whatever_the_pieces() -> None:
    mp3 = encode_mp3(tone_for("四个汉字"))
    whole = Mp3StreamDecoder(24000)
    reference = whole.feed(mp3) + whole.flush()
    rng = random.Random(7)
    pieces = Mp3StreamDecoder(24000)
    out, start = b"", 0
    while start < len(mp3):
        size = rng.randint(1, 700)
        out += pieces.feed(mp3[start : start + size])
        start += size
    out += pieces.flush()
    assert out == reference and abs(len(out) / 2 / 24000 - 0.6) < 0.1


def test_mp3_decoder_resamples_to_the_asked_rate() -> None:
    decoder = Mp3StreamDecoder(16000)
    pcm = decoder.feed(encode_mp3(tone_for("两字"))) + decoder.flush()
    assert abs(len(pcm) / 2 / 16000 - 0.3) < 0.1


def test_garbage_is_not_mp3() -> None:
    decoder = Mp3StreamDecoder(24000)
    with pytest.raises(ValueError, match="not decodable"):
        decoder.feed(b"\xff\xfb\x90\x00" + bytes(range(256)) * 8)
        decoder.flush()


async def test_closing_the_stream_mid_sentence_stops_promptly() -> None:
    async with EdgeSpeechServer(chunk_delay=0.1) as server:
        tts = EdgeTTS(service_url=server.url)
        stream = tts.synthesize("这句话很长，但是我们只听第一段就停下来。")
        first = await anext(stream)
        started = time.perf_counter()
        await stream.aclose()
        assert time.perf_counter() - started < 1.0
        assert first
        (request,) = server.requests
        await asyncio.sleep(0.3)
        assert request.finished_at is None  # the server never got to send the whole sentence
