"""The voices of the barge-in trials (testing/barge_in.py): the replies and the users' questions
(the Piper fixtures), backchannels and commands spoken by the default Piper voice, synthetic coughs."""

from __future__ import annotations

import json
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vixio.testing.echo_path import RATE

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def _load(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


BACKCHANNELS = ("Okay.", "Uh-huh.", "Mm-hmm.", "Yeah.")
"""Said over a reply, these acknowledge it: the reply must go on (a pause that resumes is fine)."""
COMMANDS = ("Stop.", "Wait.")
"""Said over a reply, these stop it, though they last well under `confirm_ms`."""


@dataclass(slots=True)
class Voices:
    replies: list[np.ndarray]
    users: list[np.ndarray]
    backchannels: list[np.ndarray] = field(default_factory=list)
    commands: list[np.ndarray] = field(default_factory=list)
    reply_texts: list[str] = field(default_factory=list)
    """The text of each of `replies` (what the server sent to TTS)."""

    @classmethod
    def from_fixtures(cls, short: bool = False) -> Voices:
        """The Piper fixtures; with `short`, also backchannels and commands spoken by the
        default Piper voice (vixio[piper]; the user's voice in the fixtures), deterministic."""
        manifest = json.loads((FIXTURES / "speech_zh" / "manifest.json").read_text())
        zh = sorted((FIXTURES / "speech_zh").glob("*.wav"))
        voices = cls(
            [_load(p) for p in zh],
            [_load(p) for p in sorted((FIXTURES / "speech").glob("*.wav"))],
            reply_texts=[manifest[p.name]["text"] for p in zh],
        )
        if short:
            voices.backchannels = [speak(t) for t in BACKCHANNELS]
            voices.commands = [speak(t) for t in COMMANDS]
        return voices


def speak(text: str) -> np.ndarray:
    import asyncio

    from vixio.core.audio import resample
    from vixio.providers.tts.piper import PiperTTS

    async def run() -> bytes:
        tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
        return resample(b"".join([c async for c in tts.synthesize(text)]), tts.sample_rate, RATE)

    return np.frombuffer(asyncio.run(run()), dtype="<i2")


def cough(seed: int) -> np.ndarray:
    """A synthetic cough: one or two bursts (120–220 ms) of noise band-limited to ~300–3500 Hz,
    with a 10 ms attack and an exponential decay, 0–10 dB below the fixtures' speech level."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(rng.integers(1, 3))):
        n = int(rng.uniform(0.12, 0.22) * RATE)
        t = np.arange(n) / RATE
        noise = np.diff(rng.standard_normal(n + 1))  # tilted up: a cough's breathy top
        noise = np.convolve(noise, np.ones(5) / 5, mode="same")  # and rolled off above ~3.5 kHz
        env = np.minimum(t / 0.01, 1.0) * np.exp(-t / rng.uniform(0.04, 0.08))
        burst = noise * env
        burst *= 10 ** (-rng.uniform(0, 10) / 20) * 0.3 / np.abs(burst).max()
        out += [burst, np.zeros(int(rng.uniform(0.08, 0.2) * RATE))]
    return (np.concatenate(out) * 32767).astype(np.int16)


def first_voiced(speech: np.ndarray) -> int:
    """Sample where the fixture's speech starts (the Piper clips begin with a little silence)."""
    frames = len(speech) // 160
    power = (speech[: frames * 160].astype(np.float64).reshape(frames, 160) ** 2).mean(axis=1)
    loud = np.nonzero(power > power.max() * 0.01)[0]
    return int(loud[0]) * 160 if len(loud) else 0
