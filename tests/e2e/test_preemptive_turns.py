"""Preemptive turns through the real server: the simulated device speaks Piper speech (with a
pause mid-sentence where a test needs one) as Opus, Silero finds the pauses, an ASR on loopback
transcribes what it was sent (`UtteranceServices` counts the stretches of speech in the upload),
and the model answers the text it got, so an answer to the first half of a paused sentence
would be heard as such."""

from __future__ import annotations

import ast
import asyncio
from typing import Any

import pytest

pytest.importorskip("piper")

from loguru import logger  # noqa: E402

from vixio.app.server import VixioServer  # noqa: E402
from vixio.config.models import VixioConfig  # noqa: E402
from vixio.console.backend import LocalBackend  # noqa: E402
from vixio.stations import AgentStation  # noqa: E402
from vixio.testing.device import SimulatedDevice  # noqa: E402
from vixio.testing.llm_server import Reply, ScriptedLLMServer  # noqa: E402
from vixio.testing.turn_services import Utterance, UtteranceServices  # noqa: E402
from vixio.transports.xiaozhi.protocol.codec import resample  # noqa: E402

pytestmark = pytest.mark.models

RATE = 16000
WEATHER = Utterance(("What is the weather in", "Beijing?"))
VOLUME = Utterance(("Set the volume to", "thirty."))
TIME = Utterance(("What time is it?",))
STORY = Utterance(("Tell me a long story.",))
QUIET = bytes(2 * RATE // 2)


@pytest.fixture(scope="module")
def voice() -> dict[str, bytes]:
    """Each part of the utterances above, spoken by Piper (fixed rhythm: the same every run)."""

    async def speak(texts: list[str]) -> dict[str, bytes]:
        from vixio.providers.tts.piper import PiperTTS

        tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
        spoken = {}
        for text in texts:
            pcm = b"".join([chunk async for chunk in tts.synthesize(text)])
            spoken[text] = resample(pcm, tts.sample_rate, RATE)
        return spoken

    return asyncio.run(speak([p for u in (WEATHER, VOLUME, TIME, STORY) for p in u.parts]))


def spoken(voice: dict[str, bytes], utterance: Utterance, pause: float = 0.45, tail: float = 1.5) -> bytes:
    gap = bytes(2 * int(RATE * pause))
    return QUIET + gap.join(voice[part] for part in utterance.parts) + bytes(2 * int(RATE * tail))


async def start(services: UtteranceServices, llm: ScriptedLLMServer | None = None, **overrides: Any) -> VixioServer:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "vad": {"provider": "silero-onnx", "min_silence_ms": 500, "early_silence_ms": 200},
            "asr": {"provider": "openai", "api_base": services.base_url, "api_key": "t"},
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_key": "t",
                "api_base": (llm or services).base_url,
            },
            "tts": {"provider": "openai", "api_base": services.base_url, "api_key": "t", "fallback": None},
            **overrides,
        }
    )
    server = VixioServer(config)
    await server.start()
    return server


def url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


def agent_of(server: VixioServer) -> AgentStation:
    session = next(iter(server.transport.connections.values())).session
    assert session is not None
    return next(s for s in session.pipeline.stations if isinstance(s, AgentStation))


def said(device: SimulatedDevice, after: int = 0) -> list[tuple[str, str]]:
    """(type, text) of every stt the device got, and of its sentences, joined per reply."""
    out: list[tuple[str, str]] = []
    for message in device.received[after:]:
        if message.type == "stt":
            out.append(("stt", message.data.get("text", "")))
        elif message.type == "tts" and message.data.get("state") == "sentence_start":
            if out and out[-1][0] == "tts":
                out[-1] = ("tts", f"{out[-1][1]} {message.data['text']}")
            else:
                out.append(("tts", message.data["text"]))
    return out


async def test_a_paused_sentence_is_answered_whole_and_its_first_half_leaves_no_trace(voice: dict[str, bytes]) -> None:
    async with UtteranceServices() as services:
        server = await start(services)
        try:
            async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
                await device.connect()
                await device.start_listening("auto")
                services.speak(WEATHER)
                mark = device.mark()
                await device.stream_audio(spoken(voice, WEATHER))
                await device.wait_for("tts", state="stop", after=mark, timeout=10)
                first_half = WEATHER.heard(1)
                # The model was started on the first half at the pause (a preemptive turn) ...
                assert [c.user_text for c in services.chats] == [first_half, WEATHER.text]
                # ... and nothing of that attempt reached the device, the history or the model.
                assert said(device, mark) == [("stt", WEATHER.text), ("tts", f"The answer to {WEATHER.text}")]
                assert " ".join(services.speech_inputs) == f"The answer to {WEATHER.text}"
                agent = agent_of(server)
                users = [m["content"] for m in agent.provider.history if m.get("role") == "user"]
                assert users == [WEATHER.text]
                session_users = [m.content for m in agent.session_state.history if m.role == "user"]
                assert session_users == [WEATHER.text]
                notes = agent.session_state.turns[-1].notes
                assert notes["preemptive_cancelled"] == 1
                assert notes["endpoint"] == "end: ends in '?'"  # the second pause confirmed it
        finally:
            await server.stop()


async def test_marks_show_the_preemptive_start_the_early_confirmation_and_what_was_saved(
    voice: dict[str, bytes],
) -> None:
    lines: list[str] = []
    logger.add(lambda message: lines.append(str(message)), level="INFO", filter="vixio.transports")
    async with UtteranceServices() as services:
        server = await start(services)
        try:
            async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
                await device.connect()
                await device.start_listening("auto")
                services.speak(TIME)
                mark = device.mark()
                await device.stream_audio(spoken(voice, TIME))
                await device.wait_for("tts", state="stop", after=mark, timeout=10)
                metrics = agent_of(server).session_state.turns[-1]
                ms = metrics.durations()
                for name in (
                    "speech_pause",
                    "asr_draft",
                    "preemptive_start",
                    "speech_end",
                    "turn_confirmed",
                    "asr_final",
                    "llm_first_token",
                    "tts_first_audio",
                    "first_frame_sent",
                ):
                    assert name in ms, (name, ms)
                assert ms["speech_pause"] == 0  # the first mark: 200 ms into the silence
                assert ms["preemptive_start"] <= ms["turn_confirmed"] <= ms["tts_first_audio"]
                # Confirmed by its question mark (the note says which rule ended the turn), before
                # the 500 ms of silence would have: 300 ms after the first mark, which sits at 200.
                assert metrics.notes["endpoint"] == "end: ends in '?'"
                assert ms["turn_confirmed"] < 300, ms
                assert metrics.notes["agent_saved_ms"] >= 0 and metrics.notes["asr_saved_ms"] > 0
                assert "preemptive_cancelled" not in metrics.notes
                assert said(device, mark) == [("stt", TIME.text), ("tts", f"The answer to {TIME.text}")]
                # The console shows the same marks and notes; the per-turn log line has the notes.
                backend = LocalBackend(server)
                detail = await backend.session(next(iter(server.transport.connections)))
                (turn,) = [t for t in detail["conversation"] if t["heard"]]
                assert turn["marks"] == ms and turn["notes"] == metrics.notes
                (line,) = [line for line in lines if "latency (ms from first mark)" in line]
                assert "'agent_saved_ms'" in line.partition(" latency")[0]  # the notes, before the marks
                # The marks end the line as one literal, as bench/capacity/server.py reads them.
                assert ast.literal_eval(line.partition("latency (ms from first mark): ")[2].strip()) == ms
        finally:
            await server.stop()


async def test_a_control_tool_runs_only_once_the_turn_is_confirmed(
    voice: dict[str, bytes], llm: ScriptedLLMServer
) -> None:
    def user_said(text: str) -> Any:
        def check(body: dict[str, Any]) -> None:
            assert [m for m in body["messages"] if m["role"] == "user"][-1]["content"] == text

        return check

    llm.expect(
        # the attempt at the first pause: the call waits, and is dropped with the attempt
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": 5}, check=user_said(VOLUME.heard(1))),
        # the attempt on the whole sentence: the call waits for the confirmation, then runs
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": 30}, check=user_said(VOLUME.text)),
        Reply.text("The volume is thirty."),
    )
    async with UtteranceServices() as services:
        server = await start(services, llm)
        try:
            async with SimulatedDevice(ws_url=url(server)) as device:
                await device.connect()
                await device.start_listening("auto")
                services.speak(VOLUME)
                mark = device.mark()
                await device.stream_audio(spoken(voice, VOLUME))
                await device.wait_for("tts", state="stop", after=mark, timeout=10)
                calls = [
                    (n, m.data["payload"]["params"])
                    for n, m in enumerate(device.received)
                    if n >= mark and m.type == "mcp" and m.data["payload"].get("method") == "tools/call"
                ]
                assert [params["arguments"] for _, params in calls] == [{"volume": 30}]
                stt = next(n for n, m in enumerate(device.received) if n >= mark and m.type == "stt")
                assert calls[0][0] > stt  # after the turn was confirmed (its stt went out)
            llm.assert_all_consumed()
        finally:
            await server.stop()


async def test_barge_in_cuts_an_adopted_reply_and_the_next_turn_is_preemptive_too(voice: dict[str, bytes]) -> None:
    long_answer = "Once upon a time there was a small speaker on a desk. " * 6
    async with UtteranceServices(
        answer=lambda text: long_answer if "story" in text else f"The answer to {text}", tts_seconds=3.0
    ) as services:
        server = await start(services)
        try:
            async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
                await device.connect()
                await device.start_listening("realtime")
                services.speak(STORY)
                mark = device.mark()
                await device.stream_audio(spoken(voice, STORY, tail=0.8))
                await device.wait_for("tts", state="sentence_start", after=mark, timeout=10)
                await asyncio.sleep(1.0)
                services.speak(TIME)
                barge = device.mark()
                await device.stream_audio(spoken(voice, TIME))
                await device.wait_for("tts", state="stop", after=barge, timeout=10)
                await device.wait_for("stt", after=barge, timeout=10)
                answer = await device.wait_for("tts", state="sentence_start", after=barge, timeout=10)
                assert answer["text"] == f"The answer to {TIME.text}"
                agent = agent_of(server)
                cut = [m for m in agent.session_state.history if m.role == "assistant" and m.interrupted]
                assert len(cut) == 1 and cut[0].content.startswith("Once upon a time")
                assert len(cut[0].content) < len(long_answer.strip())
                assert agent.session_state.turns[-1].notes["endpoint"] == "end: ends in '?'"
        finally:
            await server.stop()
