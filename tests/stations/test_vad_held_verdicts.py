"""A paused reply's verdict always comes, and a barge-in's turn always ends: with an ASR slower
than `resume_after_ms` (the verdict falls to the speech's length after its end), and with a
device that stops sending audio while the transcript is awaited (the silence is taken as such).
Silero and a recorded question, real; the ASR is a coroutine the test releases, for its timing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from vixio.core.chunk import AudioChunk, InterruptChunk, VADEndChunk, VADStartChunk
from vixio.core.pipeline import Pipeline
from vixio.stations import VADStation
from vixio.stations.barge_in_words import WordRules
from vixio.stations.interruption import InterruptionArbiter
from vixio.testing.device.audio import read_wav_16k_mono

pytestmark = pytest.mark.models

RATE = 16000
STEP = RATE * 60 // 1000 * 2  # one 60 ms frame, in bytes
QUESTION = Path(__file__).parents[1] / "fixtures" / "speech" / "weather.wav"


class SlowASR:
    """Transcribes only once released (`release`); counts what it was asked."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.asked = 0

    async def transcribe(self, pcm: bytes, rate: int) -> str:
        self.asked += 1
        await self.released.wait()
        return "What is the weather like today?"


def _station(asr: SlowASR) -> VADStation:
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD

    arbiter = InterruptionArbiter(confirm_ms=600, words=WordRules(), resume_after_ms=1500)
    return VADStation(SileroOnnxVAD(RATE), arbiter=arbiter, transcribe=asr.transcribe, partial_ms=240)


async def _over_a_reply(pipeline: Pipeline, audio: bytes) -> list[object]:
    controls: list[str] = []
    pipeline.state.bot_speaking = True
    pipeline.state.reply_control = controls.append
    out: list[object] = []
    for i in range(0, len(audio), STEP):
        await pipeline.push(AudioChunk(pcm=audio[i : i + STEP], sample_rate=RATE))
        await pipeline.join()
        out += pipeline.drain_output()
    assert controls == ["pause"]
    return out


def _question() -> bytes:
    return b"\x00\x00" * int(0.3 * RATE) + read_wav_16k_mono(QUESTION)


async def test_a_transcript_slower_than_resume_after_leaves_the_length_to_decide_and_the_turn_ends() -> None:
    asr = SlowASR()
    station = _station(asr)
    async with Pipeline([station], session_id="s") as pipeline:
        out = await _over_a_reply(pipeline, _question() + b"\x00\x00" * int(3.0 * RATE))
    kinds = [type(c) for c in out if not isinstance(c, AudioChunk)]
    assert kinds == [InterruptChunk, VADStartChunk, VADEndChunk], kinds  # the question is a turn, start to end
    assert asr.asked >= 1 and not asr.released.is_set()


async def test_a_device_that_stops_sending_still_gets_its_verdict() -> None:
    asr = SlowASR()
    station = _station(asr)
    speech = _question()
    speech_ms = np.frombuffer(speech, dtype="<i2").size * 1000 // RATE
    async with Pipeline([station], session_id="s") as pipeline:
        out = await _over_a_reply(pipeline, speech + b"\x00\x00" * int(0.8 * RATE))  # then nothing more
        assert not [c for c in out if isinstance(c, InterruptChunk)], speech_ms
        asr.released.set()  # the transcript comes after the device's last frame
        for _ in range(100):
            await asyncio.sleep(0.05)
            out += pipeline.drain_output()
            if any(isinstance(c, VADEndChunk) for c in out):
                break
    kinds = [type(c) for c in out if not isinstance(c, AudioChunk)]
    assert kinds == [InterruptChunk, VADStartChunk, VADEndChunk], kinds
