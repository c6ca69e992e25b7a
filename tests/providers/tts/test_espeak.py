"""EspeakTTS with the real libespeak-ng from espeakng-loader."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("espeakng_loader")

from vixio.providers.tts import EspeakTTS, TTSError

from .audio import pcm_seconds, speech_fraction

pytestmark = pytest.mark.unit

MANDARIN = "你好，世界。今天天气很好，我们去公园散步吧。"


async def speak(tts: EspeakTTS, text: str) -> bytes:
    return b"".join([chunk async for chunk in tts.synthesize(text)])


async def test_english_hello_world_is_speech_of_plausible_length() -> None:
    tts = EspeakTTS("en-us")
    await tts.initialize()
    assert tts.sample_rate == 22050
    pcm = await speak(tts, "hello world")
    assert len(pcm) % 2 == 0
    assert 0.6 < pcm_seconds(pcm, 22050) < 2.5
    assert np.abs(np.frombuffer(pcm, "<i2")).max() > 3000
    assert speech_fraction(pcm, 22050) > 0.4


async def test_cmn_reads_chinese_characters_as_mandarin_syllables() -> None:
    mandarin = await speak(EspeakTTS("cmn"), MANDARIN)
    seconds = pcm_seconds(mandarin, 22050)
    syllables = sum(1 for ch in MANDARIN if "\u4e00" <= ch <= "\u9fff")
    # Mandarin speaks about 3-6 syllables a second; a voice without the cmn dictionary
    # spells each character as "Chinese letter ..." and takes several times longer.
    assert 0.15 * syllables < seconds < 0.45 * syllables
    assert speech_fraction(mandarin, 22050) > 0.4
    english_reading = await speak(EspeakTTS("en-us"), MANDARIN)
    assert pcm_seconds(english_reading, 22050) > 1.5 * seconds


async def test_rate_changes_the_duration() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    slow = pcm_seconds(await speak(EspeakTTS("en-us", rate_wpm=120), text), 22050)
    fast = pcm_seconds(await speak(EspeakTTS("en-us", rate_wpm=360), text), 22050)
    assert slow > 2 * fast


async def test_sentences_stream_one_chunk_each() -> None:
    chunks = [chunk async for chunk in EspeakTTS("en-us").synthesize("One. Two! Three? 四。")]
    assert len(chunks) == 4
    assert all(pcm_seconds(chunk, 22050) > 0.2 for chunk in chunks)


async def test_concurrent_syntheses_keep_their_own_voice_and_rate() -> None:
    text = "Concurrent calls must not share a voice. Each keeps its own settings."
    slow, fast, mandarin = EspeakTTS("en-us", rate_wpm=150), EspeakTTS("en-us", rate_wpm=400), EspeakTTS("cmn")
    alone = {
        "slow": pcm_seconds(await speak(slow, text), 22050),
        "fast": pcm_seconds(await speak(fast, text), 22050),
        "cmn": pcm_seconds(await speak(mandarin, MANDARIN), 22050),
    }
    jobs = [("slow", speak(slow, text)), ("fast", speak(fast, text)), ("cmn", speak(mandarin, MANDARIN))] * 6
    results = await asyncio.gather(*(job for _, job in jobs))
    for (kind, _), pcm in zip(jobs, results, strict=True):
        # espeak adds tiny random variation; a voice or rate leaking across calls changes a lot.
        assert pcm_seconds(pcm, 22050) == pytest.approx(alone[kind], rel=0.05), kind


async def test_aclose_stops_before_the_remaining_sentences() -> None:
    tts = EspeakTTS("en-us")
    spoken: list[str] = []
    speak_sentences = tts._speak_sentences

    def recording(sentences: list[str], cancel: object) -> object:
        for pcm in speak_sentences(sentences, cancel):  # type: ignore[arg-type]
            spoken.append("sentence")
            yield pcm

    tts._speak_sentences = recording  # type: ignore[method-assign]
    stream = tts.synthesize(" ".join(f"Sentence number {i}." for i in range(40)))
    await anext(stream)
    await stream.aclose()
    await asyncio.sleep(0.2)
    assert len(spoken) <= 3  # the one yielded, at most one prefetched and one in flight


async def test_unknown_voice_raises_naming_it() -> None:
    with pytest.raises(TTSError, match="'xx-nonexistent'"):
        await EspeakTTS("xx-nonexistent").initialize()


def test_out_of_range_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rate_wpm.*1000"):
        EspeakTTS(rate_wpm=1000)
    with pytest.raises(ValueError, match="pitch.*-1"):
        EspeakTTS(pitch=-1)
