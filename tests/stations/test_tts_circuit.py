"""TTSCircuit and TTSStation together: a failing TTS costs one wait, the fallback speaks until a
background probe hears the TTS again, and each outage is logged once when it starts and ends.
The tests of waits, hangs and pauses run on a virtual clock (vixio.testing.virtual_time): exact
durations, no sleeping, the same on a busy machine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from typing import Any, Literal

import numpy as np
import pytest
from loguru import logger

from vixio.core.chunk import AudioChunk, StreamCompleteChunk, TextChunk
from vixio.providers.tts.base import TTSError, TTSProvider
from vixio.stations import TTSStation
from vixio.stations.tts.circuit import TTSCircuit
from vixio.testing.harness import run_station
from vixio.testing.virtual_time import virtual_time

from .fakes import ToneTTS

pytestmark = pytest.mark.unit

Mode = Literal["ok", "fail", "hang", "stall"]


class FlakyTTS(TTSProvider):
    """A TTS whose behaviour the test switches: speaks (100 ms of tone a chunk, two chunks),
    fails at once, hangs before its first audio, or stalls after one chunk."""

    name = "flaky"
    sample_rate = 24000

    def __init__(self, mode: Mode = "ok") -> None:
        self.mode: Mode = mode
        self.requests: list[str] = []

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        self.requests.append(text)
        chunk = (np.ones(2400) * 3000).astype("<i2").tobytes()
        if self.mode == "fail":
            raise TTSError("flaky: HTTP 500")
        if self.mode == "hang":
            await asyncio.sleep(3600)
        yield chunk
        if self.mode == "stall":
            await asyncio.sleep(3600)
        yield chunk


@pytest.fixture
def log_lines() -> Iterator[list[tuple[str, str]]]:
    lines: list[tuple[str, str]] = []
    sink = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])), level="DEBUG")
    yield lines
    logger.remove(sink)


def at(lines: list[tuple[str, str]], level: str) -> list[str]:
    return [message for lvl, message in lines if lvl == level]


def sentences(*texts: str) -> list[Any]:
    return [*[TextChunk(text=t, role="assistant") for t in texts], StreamCompleteChunk(source="agent")]


def audio_seconds(out: list[Any]) -> float:
    return sum(c.duration for c in out if isinstance(c, AudioChunk))


async def test_a_failure_sends_that_sentence_and_the_next_ones_to_the_fallback(log_lines: list) -> None:
    primary, fallback = FlakyTTS("fail"), ToneTTS()
    circuit = TTSCircuit(primary, fallback, first_audio_timeout=1)
    out = await run_station(TTSStation(primary, circuit=circuit), sentences("One two.", "Three four.", "Five."))
    assert primary.requests == ["One two."]  # the rest of the reply did not try it again
    assert fallback.spoken == ["One two.", "Three four.", "Five."]
    assert audio_seconds(out) == pytest.approx(0.25, abs=0.01)
    # A reply in another session of the process (same circuit) does not wait either.
    await run_station(TTSStation(primary, circuit=circuit), sentences("Later."))
    assert primary.requests == ["One two."] and fallback.spoken[-1] == "Later."
    warnings = at(log_lines, "WARNING")
    assert len(warnings) == 1 and "TTS is down: flaky: HTTP 500" in warnings[0] and "tone" in warnings[0]
    assert at(log_lines, "ERROR") == []


@virtual_time
async def test_a_hang_costs_one_first_audio_timeout_then_nothing(log_lines: list) -> None:
    loop = asyncio.get_running_loop()
    primary, fallback = FlakyTTS("hang"), ToneTTS()
    circuit = TTSCircuit(primary, fallback, first_audio_timeout=0.3, clock=loop.time)
    started = loop.time()
    out = await run_station(TTSStation(primary, circuit=circuit), sentences("One.", "Two.", "Three."))
    assert loop.time() - started == pytest.approx(0.3, abs=0.01)  # one wait, not one per sentence (0.9)
    assert fallback.spoken == ["One.", "Two.", "Three."] and audio_seconds(out) > 0
    warnings = at(log_lines, "WARNING")
    assert len(warnings) == 1 and "no audio for 0.3 s (tts.fallback_after)" in warnings[0]


@virtual_time
async def test_a_stall_mid_sentence_cuts_it_and_the_rest_goes_to_the_fallback(log_lines: list) -> None:
    loop = asyncio.get_running_loop()
    primary, fallback = FlakyTTS("stall"), ToneTTS()
    circuit = TTSCircuit(primary, fallback, first_audio_timeout=0.3, clock=loop.time)
    out = await run_station(TTSStation(primary, circuit=circuit), sentences("One.", "Two."))
    assert primary.requests == ["One."] and fallback.spoken == ["Two."]
    assert audio_seconds(out) == pytest.approx(0.1 + 0.05, abs=0.01)  # one chunk of One., then Two.
    warnings = at(log_lines, "WARNING")
    assert len(warnings) == 1 and "a sentence was cut off" in warnings[0]


@virtual_time
async def test_a_background_probe_brings_the_primary_back_without_anyone_waiting(log_lines: list) -> None:
    loop = asyncio.get_running_loop()
    primary, fallback = FlakyTTS("fail"), ToneTTS()
    circuit = TTSCircuit(primary, fallback, first_audio_timeout=1, retry_after=0.2, clock=loop.time)
    station = TTSStation(primary, circuit=circuit)
    await run_station(station, sentences("Down."))
    assert circuit.down and circuit.probes == 0
    primary.mode = "hang"  # a probe that hangs must not hold the sentence up
    await asyncio.sleep(0.1)
    await run_station(TTSStation(primary, circuit=circuit), sentences("Too early."))
    assert circuit.probes == 0  # the pause (0.2 s) has not passed
    await asyncio.sleep(0.15)
    started = loop.time()
    await run_station(TTSStation(primary, circuit=circuit), sentences("Probe one."))
    assert circuit.probes == 1 and loop.time() - started < 0.01  # nobody waited for the hanging probe
    assert fallback.spoken[-1] == "Probe one."
    await asyncio.sleep(1.05)  # the probe gives up after first_audio_timeout; the pause doubles to 0.4 s
    assert circuit.down
    primary.mode = "ok"
    await asyncio.sleep(0.3)
    await run_station(TTSStation(primary, circuit=circuit), sentences("Not yet."))
    assert circuit.probes == 1  # 0.3 s of the doubled pause
    await asyncio.sleep(0.15)
    await run_station(TTSStation(primary, circuit=circuit), sentences("Probe two."))
    assert circuit.probes == 2 and fallback.spoken[-1] == "Probe two."  # the fallback still spoke it
    await asyncio.sleep(0.05)  # the probe hears the primary's first audio
    assert not circuit.down
    await run_station(TTSStation(primary, circuit=circuit), sentences("Back."))
    assert primary.requests[-1] == "Back." and fallback.spoken[-1] == "Probe two."
    assert len(at(log_lines, "WARNING")) == 1
    recovered = at(log_lines, "INFO")
    assert len(recovered) == 1 and "TTS (flaky) is speaking again after 2 s" in recovered[0], recovered
    await circuit.close()


async def test_without_a_fallback_sentences_are_shown_and_later_ones_do_not_wait(log_lines: list) -> None:
    primary = FlakyTTS("fail")  # an online TTS (the voice stack's circuit for one opens without a fallback)
    out = await run_station(TTSStation(primary, circuit=TTSCircuit(primary)), sentences("One.", "Two."))
    assert [c.text for c in out if isinstance(c, TextChunk)] == ["One.", "Two."]
    assert audio_seconds(out) == 0 and primary.requests == ["One."]
    errors = at(log_lines, "ERROR")
    assert len(errors) == 1 and "TTS is down" in errors[0] and "shown but not spoken" in errors[0]


async def test_an_offline_engine_without_a_fallback_still_gets_every_sentence(log_lines: list) -> None:
    # Its failures are the text's (a sentence it cannot say), not an outage.
    engine = FlakyTTS("fail")
    station = TTSStation(engine, circuit=TTSCircuit(engine, breaks=False))
    await run_station(station, sentences("Odd text."))
    engine.mode = "ok"
    out = await run_station(station, sentences("Fine text."))
    assert engine.requests == ["Odd text.", "Fine text."] and audio_seconds(out) == pytest.approx(0.2)
    assert len(at(log_lines, "ERROR")) == 1 and len(at(log_lines, "INFO")) == 1


async def test_a_request_older_than_the_outage_does_not_end_it() -> None:
    circuit = TTSCircuit(FlakyTTS(), ToneTTS())
    before = circuit.attempt()
    await asyncio.sleep(0.01)
    circuit.failed(circuit.attempt(), "HTTP 500")
    circuit.succeeded(before)  # a long sentence that started before the outage finished fine
    assert circuit.down
    after = circuit.attempt()
    circuit.succeeded(after)
    assert not circuit.down
    circuit.failed(before, "a stale failure")  # from before the recovery: not a new outage
    assert not circuit.down


async def test_a_failing_fallback_is_logged_once_until_it_speaks_again(log_lines: list) -> None:
    primary, fallback = FlakyTTS("fail"), FlakyTTS("fail")
    circuit = TTSCircuit(primary, fallback, first_audio_timeout=1)
    out = await run_station(TTSStation(primary, circuit=circuit), sentences("One.", "Two.", "Three."))
    assert audio_seconds(out) == 0 and fallback.requests == ["One.", "Two.", "Three."]
    errors = at(log_lines, "ERROR")
    assert len(errors) == 1 and "the fallback TTS (flaky) failed too" in errors[0], errors
    fallback.mode = "ok"
    await run_station(TTSStation(primary, circuit=circuit), sentences("Four."))
    fallback.mode = "fail"
    await run_station(TTSStation(primary, circuit=circuit), sentences("Five."))
    assert len(at(log_lines, "ERROR")) == 2
