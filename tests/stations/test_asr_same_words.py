"""The same speech gives the same words, wherever the VAD cut it (issue 46: the same WAV played
twice came back with different first words). Real Whisper tiny.en on espeak-ng speech, through
ASRStation, the utterance cut 8 ways as the VAD's window grid and a pause's draft cut it."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.core.audio import resample
from vixio.core.chunk import AudioChunk, TextChunk, TurnEndChunk, TurnStartChunk
from vixio.stations import ASRStation
from vixio.testing.harness import run_station

pytestmark = pytest.mark.models

SENTENCE = "Set an alarm for seven in the morning"
"""Measured before the fix: 5 different transcripts over these 8 cuts."""


async def test_every_cut_of_one_sentence_is_heard_as_the_same_words() -> None:
    pytest.importorskip("espeakng_loader", reason="espeak-ng speaks the sentence: vixio[espeak]")
    pytest.importorskip("faster_whisper", reason="vixio[whisper]")
    from vixio.providers.asr.faster_whisper import FasterWhisperASR
    from vixio.providers.tts.espeak import EspeakTTS

    tts = EspeakTTS()
    await tts.initialize()
    pcm = resample(b"".join([chunk async for chunk in tts.synthesize(SENTENCE)]), tts.sample_rate, 16000)
    voice = np.frombuffer(pcm, dtype="<i2")
    loud = np.flatnonzero(np.abs(voice) > 300)
    voice = voice[max(0, loud[0] - 1600) : loud[-1] + 1600]
    asr = FasterWhisperASR(model="tiny.en", cpu_threads=2)
    heard = set()
    for lead in range(0, 8 * 320, 640):  # 0-120 ms of silence before, in 40 ms steps
        for tail in (2400, 8000):  # a pause's draft (150 ms) and a turn's end (500 ms)
            cut = np.concatenate([np.zeros(lead, "<i2"), voice, np.zeros(tail, "<i2")]).tobytes()
            frames = [AudioChunk(pcm=cut[i : i + 1920], sample_rate=16000) for i in range(0, len(cut), 1920)]
            out = await run_station(ASRStation(asr), [TurnStartChunk(), *frames, TurnEndChunk()])
            heard |= {chunk.text for chunk in out if isinstance(chunk, TextChunk)}
    await asr.close()
    assert len(heard) == 1, heard
