"""The "is this audio at all?" check at the start of a raw-PCM TTS body: real speech passes,
random bytes and other formats fail."""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np
import pytest

from vixio.providers.tts.base import TTSError
from vixio.providers.tts.openai_compatible import _PROBE_BYTES, check_pcm_start
from vixio.testing.fault_servers import tone_pcm

pytestmark = pytest.mark.unit

SPEECH = Path(__file__).parents[2] / "fixtures" / "speech"


def wav_pcm(path: Path) -> bytes:
    with wave.open(str(path), "rb") as wav:
        return wav.readframes(wav.getnframes())


@pytest.mark.parametrize("name", ["weather.wav", "volume.wav", "story.wav", "timer.wav"])
def test_every_probe_window_of_real_speech_passes(name: str) -> None:
    pcm = wav_pcm(SPEECH / name)
    loud = (np.frombuffer(pcm, dtype="<i2").astype(np.float64) * 3).clip(-32768, 32767).astype("<i2").tobytes()
    for audio in (pcm, loud):  # also 3x louder than recorded: loud speech is still speech
        for start in range(0, len(audio) - _PROBE_BYTES, _PROBE_BYTES):
            check_pcm_start("test", audio[start : start + _PROBE_BYTES])


def test_silence_and_tones_pass() -> None:
    check_pcm_start("test", bytes(_PROBE_BYTES))
    check_pcm_start("test", tone_pcm(0.02, hz=3000))


def test_random_bytes_are_noise() -> None:
    for _ in range(20):
        with pytest.raises(TTSError, match="noise, not speech"):
            check_pcm_start("test", os.urandom(_PROBE_BYTES))


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", "WAV"),
        (b"ID3\x04\x00", "MP3"),
        (b"OggS\x00\x02", "Ogg"),
        (b"<!DOCTYPE html>", "HTML"),
    ],
)
def test_other_formats_are_named(head: bytes, kind: str) -> None:
    with pytest.raises(TTSError, match=f"looks like {kind}"):
        check_pcm_start("test", head + bytes(_PROBE_BYTES))
