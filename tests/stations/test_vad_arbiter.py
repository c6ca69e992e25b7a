"""VADStation with an InterruptionArbiter: speech over the reply pauses it, then interrupts or resumes."""

from __future__ import annotations

import pytest

from vixio.core.chunk import AudioChunk, InterruptChunk, VADEndChunk, VADStartChunk
from vixio.core.pipeline import Pipeline
from vixio.stations import VADStation
from vixio.stations.interruption import InterruptionArbiter

from .fakes import LoudnessVAD, loud, quiet

pytestmark = pytest.mark.integration


def frames(pcm: bytes, ms: int = 60) -> list[AudioChunk]:
    step = 16 * ms * 2
    return [AudioChunk(pcm=pcm[i : i + step], sample_rate=16000) for i in range(0, len(pcm), step)]


async def _run(audio: bytes, bot_speaking: bool = True) -> tuple[list[object], list[str], Pipeline]:
    pipeline = Pipeline([VADStation(LoudnessVAD(), arbiter=InterruptionArbiter(confirm_ms=600))], session_id="s")
    controls: list[str] = []
    out: list[object] = []
    async with pipeline:
        pipeline.state.bot_speaking = bot_speaking
        pipeline.state.reply_control = controls.append
        for chunk in frames(audio):
            await pipeline.push(chunk)
            await pipeline.join()  # a device's frames come 60 ms apart: one at a time
            out += pipeline.drain_output()
    return out, controls, pipeline


async def test_long_speech_over_the_reply_pauses_then_interrupts_with_all_its_audio() -> None:
    out, controls, pipeline = await _run(quiet(0.3) + loud(1.2) + quiet(0.8))
    assert controls == ["pause"]  # the interrupt itself stops the reply; no resume
    assert isinstance(out[0], InterruptChunk) and out[0].reason == "barge_in"
    assert isinstance(out[1], VADStartChunk)
    assert any(isinstance(c, VADEndChunk) for c in out)
    speech = sum(c.duration for c in out if isinstance(c, AudioChunk))
    assert speech >= 1.2  # the held onset was not lost
    assert pipeline.state.interruptions == {"real": 1, "false": 0}


async def test_a_short_sound_over_the_reply_pauses_and_resumes_it_leaving_no_turn() -> None:
    out, controls, pipeline = await _run(quiet(0.3) + loud(0.35) + quiet(0.9))
    assert controls == ["pause", "resume"]
    assert not [c for c in out if isinstance(c, InterruptChunk | VADStartChunk | VADEndChunk | AudioChunk)]
    assert pipeline.state.interruptions == {"real": 0, "false": 1}


async def test_speech_while_the_assistant_is_silent_is_an_ordinary_turn() -> None:
    out, controls, _ = await _run(quiet(0.3) + loud(0.35) + quiet(0.9), bot_speaking=False)
    assert controls == []
    assert isinstance(out[0], VADStartChunk) and isinstance(out[-1], VADEndChunk)


def test_an_arbiter_that_judges_words_needs_a_transcriber() -> None:
    from vixio.stations.barge_in_words import WordRules

    with pytest.raises(ValueError, match="transcribe"):
        VADStation(LoudnessVAD(), arbiter=InterruptionArbiter(words=WordRules()))
