"""SpeakerIdentifier: embeds in its worker thread (never on the event loop), matches against the
voiceprints, and a turn waits for it at most `wait`. A small encoder made here (an owner's ONNX
file), so no shipped weights are needed."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from vixio.core.session_state import SpeakerMatch  # noqa: E402
from vixio.providers.speaker import encoder as enc  # noqa: E402
from vixio.stations.asr.speaker_id import SpeakerIdentifier, best_match  # noqa: E402

from ..providers.speaker.test_encoder_small_model import small_state  # noqa: E402

pytestmark = pytest.mark.unit


class ThreadNotingEncoder(enc.SpeakerEncoder):
    """The real encoder, noting which thread embeds and optionally taking `delay` seconds longer."""

    delay = 0.0
    threads: list[str] = []

    def embed(self, pcm: np.ndarray) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        return super().embed(pcm)


@pytest.fixture
def encoder(tmp_path: Path) -> ThreadNotingEncoder:
    path = tmp_path / "small.onnx"
    path.write_bytes(enc._graph(small_state()))
    model = ThreadNotingEncoder(path)
    model.threads = []
    return model


def speech(seconds: float, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 3000, int(16000 * seconds))).astype("<i2").tobytes()


async def test_the_embedding_is_made_off_the_loop_and_matched(encoder: ThreadNotingEncoder) -> None:
    alice = encoder.embed(np.frombuffer(speech(2, 1), dtype="<i2"))

    async def prints() -> dict[str, np.ndarray]:
        return {"Alice": alice}

    identifier = SpeakerIdentifier(encoder, voiceprints=prints, threshold=0.99, wait=5)
    match = await identifier.settle(identifier.begin(speech(2, 1), 16000))
    assert match is not None and match.person == "Alice" and match.score == pytest.approx(1.0, abs=1e-4)
    assert encoder.threads[-1].startswith("vixio-speaker")
    assert identifier.begin(speech(0.3, 1), 16000) is None  # too short to tell voices apart
    assert identifier.begin(speech(2, 1), 8000) is None  # the encoder's rate only
    # A "yes" too short to tell: the conversation's person carries over, trusted for nothing.
    assert await identifier.settle(None, match) == SpeakerMatch("Alice", 0.0)
    assert await identifier.settle(None, SpeakerMatch("", 0.4)) is None


async def test_a_turn_waits_at_most_wait_for_a_late_identification(encoder: ThreadNotingEncoder) -> None:
    async def prints() -> dict[str, np.ndarray]:
        return {}

    encoder.delay = 1.0
    identifier = SpeakerIdentifier(encoder, voiceprints=prints, threshold=0.5, wait=0.05)
    pending = identifier.begin(speech(1, 2), 16000)
    started = time.monotonic()
    assert await identifier.settle(pending) is None  # an unknown voice this turn
    assert time.monotonic() - started < 0.9  # generous: the bound is 0.05 s, the embedding takes 1 s
    await asyncio.wrap_future(asyncio.ensure_future(pending.embedding))  # let the thread finish


def test_best_match_needs_the_threshold() -> None:
    a, b = np.array([1.0, 0.0], np.float32), np.array([0.6, 0.8], np.float32)
    assert best_match(a, {"A": a, "B": b}, 0.9).person == "A"
    assert best_match(b * 0 + np.array([0.8, 0.6], np.float32), {"A": a, "B": b}, 0.99).person == ""
    assert best_match(a, {}, 0.5).person == "" and best_match(a, {}, 0.5).score == 0.0
