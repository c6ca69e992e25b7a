"""VADStation judging held speech over the reply by its words: Silero, faster-whisper tiny.en and
Piper's voice, all real; on the audio's clock (each transcript is awaited before the next 60 ms
frame, so it reaches the arbiter one frame after it was asked for, on any machine).

Each case fails with length alone (`barge_in_words` false): "Stop." is judged before 600 ms, and
"Okay, uh-huh." and the reply's own sentence last past 600 ms yet resume the reply.
"""

from __future__ import annotations

import numpy as np
import pytest

from vixio.core.chunk import AudioChunk, InterruptChunk, VADEndChunk, VADStartChunk
from vixio.core.pipeline import Pipeline
from vixio.stations import VADStation
from vixio.stations.barge_in_words import WordRules
from vixio.stations.interruption import InterruptionArbiter

pytestmark = pytest.mark.models

pytest.importorskip("faster_whisper", reason="needs vixio[whisper]")
pytest.importorskip("piper", reason="needs vixio[piper]")

RATE = 16000
SENTENCE = "The weather today is sunny and warm."


TEXTS = ("Stop.", "Okay, uh-huh.", SENTENCE)


@pytest.fixture(scope="module")
def said() -> dict[str, bytes]:
    """Piper's default voice saying each of TEXTS (synthesised off any event loop)."""
    from vixio.testing.barge_in_voices import speak

    return {text: speak(text).tobytes() for text in TEXTS}


@pytest.fixture(scope="module")
def asr():  # type: ignore[no-untyped-def]
    from vixio.providers.asr.faster_whisper import FasterWhisperASR

    return FasterWhisperASR("tiny.en")


async def _run(
    asr, speech: bytes, words: bool, playing: str = SENTENCE
) -> tuple[list[object], list[str], float | None]:  # type: ignore[no-untyped-def]
    """Speech over a playing reply, in 60 ms frames; what came out, the reply controls, and the
    audio time (from the speech's first sample) at which an interrupt came out."""
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD

    station = VADStation(
        SileroOnnxVAD(RATE),
        arbiter=InterruptionArbiter(confirm_ms=600, words=WordRules() if words else None),
        transcribe=asr.transcribe if words else None,
        partial_ms=240,
        gap_seconds=None,  # the test holds the audio's clock: frames wait for each transcript
    )
    pipeline = Pipeline([station], session_id="s")
    lead = b"\x00\x00" * int(0.3 * RATE)
    audio = lead + speech + b"\x00\x00" * int(2.0 * RATE)
    controls: list[str] = []
    out: list[object] = []
    interrupted_at = None
    step = RATE * 60 // 1000 * 2
    async with pipeline:
        pipeline.state.bot_speaking = True
        pipeline.state.reply_control = controls.append
        pipeline.state.heard.append(playing)
        for i in range(0, len(audio), step):
            await pipeline.push(AudioChunk(pcm=audio[i : i + step], sample_rate=RATE))
            await pipeline.join()
            await station.transcribed()
            got = pipeline.drain_output()
            if interrupted_at is None and any(isinstance(c, InterruptChunk) for c in got):
                interrupted_at = (i + step - len(lead)) / 2 / RATE
            out += got
    return out, controls, interrupted_at


async def test_a_held_stop_cancels_the_reply_before_600_ms(asr, said) -> None:  # type: ignore[no-untyped-def]
    out, controls, at = await _run(asr, said["Stop."], words=True)
    assert controls == ["pause"]
    assert at is not None and at < 0.6, at
    assert isinstance(out[0], InterruptChunk) and isinstance(out[1], VADStartChunk)
    assert isinstance(out[-1], VADEndChunk)  # the held speech became the turn, start to end
    _, _, at_by_length = await _run(asr, said["Stop."], words=False)
    assert at_by_length is None or at_by_length >= 0.6


async def test_a_held_backchannel_resumes_the_reply_though_it_lasts_past_600_ms(asr, said) -> None:  # type: ignore[no-untyped-def]
    speech = said["Okay, uh-huh."]
    out, controls, at = await _run(asr, speech, words=True)
    assert controls == ["pause", "resume"], out
    assert at is None and not [c for c in out if isinstance(c, AudioChunk | VADStartChunk | VADEndChunk)]
    _, by_length, _ = await _run(asr, speech, words=False)
    assert by_length == ["pause"]  # length alone: a barge-in


async def test_the_echo_of_the_sentence_being_played_resumes_it(asr, said) -> None:  # type: ignore[no-untyped-def]
    speech = said[SENTENCE]
    out, controls, at = await _run(asr, speech, words=True)
    assert controls == ["pause", "resume"] and at is None
    assert not [c for c in out if isinstance(c, AudioChunk | VADStartChunk | VADEndChunk)]  # nor the rest of it
    # the same words while another sentence plays are the user's: a barge-in, before 600 ms
    _, controls, at = await _run(asr, speech, words=True, playing="Here is a joke about a cat.")
    assert controls == ["pause"] and at is not None


def test_the_speech_is_what_the_test_says(said) -> None:  # type: ignore[no-untyped-def]
    assert len(said["Okay, uh-huh."]) / 2 / RATE > 0.7  # longer than confirm_ms with the VAD's padding
    assert np.frombuffer(said["Stop."], dtype="<i2").size / RATE < 1.0
