"""The canceller threads: a session's frames always go to the same thread, sessions are spread."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vixio.testing.echo_path import EchoPath
from vixio.transports.xiaozhi.aec import canceller as aec

pytestmark = pytest.mark.unit

pytest.importorskip("pywebrtc_audio")


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aec, "AEC_THREADS", 2)
    monkeypatch.setattr(aec, "_AEC_WORKERS", [])


def test_sessions_are_spread_over_the_threads_and_each_keeps_one(two_threads: None) -> None:
    first, second, third = (aec.SessionEchoCanceller() for _ in range(3))
    assert aec.aec_worker(first) is aec.aec_worker(first)
    assert aec.aec_worker(first) is not aec.aec_worker(second)
    assert aec.aec_worker(third) is aec.aec_worker(first)
    assert len(aec._AEC_WORKERS) == 2


def test_two_sessions_on_two_threads_each_get_their_own_echo_removed(two_threads: None) -> None:
    rng = np.random.default_rng(3)
    frame, frames = 960, 120
    boards = []
    for seed in (1, 2):
        reply = (rng.standard_normal(frame * frames) * 4000).astype(np.int16)
        mic = EchoPath(seed=seed, delay_ms=100.0, jitter_ms=0.0).mic(reply)
        boards.append((aec.SessionEchoCanceller(), reply, mic))

    async def run(canceller: aec.SessionEchoCanceller, reply: np.ndarray, mic: np.ndarray) -> np.ndarray:
        out = []
        for k in range(frames):
            stamp = 1 + 60 * k
            canceller.sent(stamp, reply[k * frame : (k + 1) * frame])
            job = (canceller, mic[k * frame : (k + 1) * frame].tobytes(), stamp)
            out.append(np.frombuffer(await aec.aec_worker(canceller).submit(job), dtype="<i2"))
        return np.concatenate(out)

    async def both() -> list[np.ndarray]:
        return await asyncio.gather(*(run(*b) for b in boards))

    outs = asyncio.run(both())
    assert aec.aec_worker(boards[0][0]) is not aec.aec_worker(boards[1][0])
    for (_, _, mic), out in zip(boards, outs, strict=True):
        late = slice(frame * frames // 2, None)  # after convergence
        removed = 10 * np.log10(
            np.square(mic[late], dtype=np.float64).sum() / np.square(out[late], dtype=np.float64).sum()
        )
        assert removed > 10.0, removed
