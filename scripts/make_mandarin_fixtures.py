"""Regenerate the Mandarin speech fixtures in tests/fixtures/speech_zh/ with espeak-ng `cmn` (offline).

Run: .venv/bin/python scripts/make_mandarin_fixtures.py

Needs `espeakng-loader` (vixio[espeak]) and `soxr`. No offline neural Mandarin voice installs
with pip here, so these are espeak-ng's robotic `cmn` voice (libespeak-ng 1.52, read from the
Chinese characters), resampled from 22050 Hz to 16 kHz mono int16 — the Xiaozhi uplink rate —
with 0.3 s of silence at each end. espeak is deterministic: a rerun gives the same audio.
`manifest.json` maps each file to its text. The fixtures are harder than a person's voice for
Whisper base: bench/bench_mandarin.py measures its character error rate on them.
"""

from __future__ import annotations

import asyncio
import json
import wave
from pathlib import Path

import numpy as np

TARGET_RATE = 16000
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speech_zh"
UTTERANCES = {
    "weather.wav": "今天天气怎么样？",
    "music.wav": "帮我播放周杰伦的歌。",
    "volume.wav": "把音量调到五十。",
    "timer.wav": "设置一个十分钟的定时器。",
    "joke.wav": "给我讲个笑话吧。",
    "time.wav": "现在几点了？",
    "light.wav": "打开客厅的灯。",
    "thanks.wav": "谢谢你，再见。",
}


async def synthesize(text: str) -> tuple[bytes, int]:
    from vixio.providers.tts.espeak import EspeakTTS

    tts = EspeakTTS(voice="cmn")
    pcm = b"".join([chunk async for chunk in tts.synthesize(text)])
    return pcm, tts.sample_rate


def main() -> None:
    import soxr

    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, text in UTTERANCES.items():
        pcm, rate = asyncio.run(synthesize(text))
        audio = soxr.resample(np.frombuffer(pcm, dtype="<i2"), rate, TARGET_RATE, quality="HQ")
        pad = np.zeros(int(0.3 * TARGET_RATE), dtype="<i2")
        audio = np.concatenate([pad, audio.astype("<i2"), pad])
        path = FIXTURES / name
        with wave.open(str(path), "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(TARGET_RATE)
            wav.writeframes(audio.tobytes())
        print(f"{path.name}: {audio.shape[0] / TARGET_RATE:.2f} s, {path.stat().st_size // 1024} KB  {text!r}")
    manifest = {
        name: {"text": text, "sample_rate": TARGET_RATE, "voice": "espeak-ng cmn"} for name, text in UTTERANCES.items()
    }
    (FIXTURES / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
