"""`vad.quiet_below_dbfs` (on by default) through `vixio serve --workers 2`: a firmware-like device
in a quiet room is heard and answered while the VAD model skips the room's silence, one in a noisier
room gets every window scored; `/metrics` counts what was skipped, summed over the workers.
Real Opus, real Silero (silero-onnx, the default), an OpenAI-compatible ASR and the scripted LLM on
loopback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.metrics.test_metrics_workers import scrape, value
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.audio import read_wav_16k_mono
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

SPEECH = Path(__file__).parent.parent / "fixtures" / "speech" / "weather.wav"
WINDOW_S = 512 / 16000


def room(seconds: float, dbfs: float, seed: int) -> bytes:
    """A room's background through the microphone: Gaussian noise at `dbfs` (RMS), 16 kHz int16."""
    rms = 32768 * 10 ** (dbfs / 20)
    samples = np.random.default_rng(seed).normal(0, rms, int(seconds * 16000))
    return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


async def test_a_quiet_room_is_heard_and_its_silence_skipped_a_noisy_one_scored(
    tmp_path: Path, llm: ScriptedLLMServer, speech: SpeechFaultServer
) -> None:
    speech.transcript = "What is the weather like today?"
    serve = await start_serve(
        tmp_path,
        llm,
        "--workers",
        "2",
        extra=f"""
asr: {{provider: openai, api_base: "{speech.base_url}"}}
""",
    )
    question = read_wav_16k_mono(SPEECH)
    try:
        await serve.wait_ready()
        assert value(await scrape(serve), "vixio_vad_quiet_windows_total") == 0
        skipped = 0.0
        for index, (dbfs, quiet) in enumerate([(-70, True), (-50, False)]):
            async with SimulatedDevice(ota_url=serve.ota_url, device_id=f"02:00:00:00:0{index}:a1") as device:
                await device.connect()
                await device.start_listening("auto")
                llm.expect(Reply.text("It is sunny."))
                mark = device.mark()
                await device.stream_audio(room(3.0, dbfs, seed=index) + question + room(1.5, dbfs, seed=10 + index))
                await device.wait_for("tts", state="stop", after=mark, timeout=60)
                heard = [m.data.get("text") for m in device.received if m.type == "stt"]
                assert heard == ["What is the weather like today?"], (dbfs, heard)

                async def counted() -> float | None:
                    samples = await scrape(serve)
                    return value(samples, "vixio_vad_quiet_windows_total")

                now = await until(counted, 10, "the quiet windows in /metrics")
                if quiet:  # most of the 3 s before the question went unscored
                    assert now - skipped >= 0.6 * 3.0 / WINDOW_S, now
                else:  # -50 dBFS is above the level: every window was scored
                    assert now == skipped, now
                skipped = now
        llm.assert_all_consumed()
    finally:
        await serve.stop()
