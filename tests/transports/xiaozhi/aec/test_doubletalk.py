"""DoubleTalk: fires on a user speaking over the echo, not on the echo alone, with the echo's
delay wandering ±20 ms (the benchmark's board: `EchoPath`), behind a real AEC3."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.testing.barge_in_voices import Voices, first_voiced
from vixio.testing.echo_path import RATE, EchoPath

pytestmark = pytest.mark.unit

pytest.importorskip("pywebrtc_audio", reason="needs vixio[aec]")

FRAME = 960
DELAY_MS, LEAD_MS = 120, 30


def _run(played: np.ndarray, user: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The board's microphone through AEC3 and DoubleTalk, frame by frame: each 10 ms hop's
    double-talk flag, AEC3's output and what DoubleTalk handed on."""
    from pywebrtc_audio import EchoCanceller

    from vixio.transports.xiaozhi.aec.doubletalk import DoubleTalk

    mic = EchoPath(seed=3, delay_ms=DELAY_MS, jitter_ms=20.0).mic(played, user)
    shift = (DELAY_MS - LEAD_MS) * RATE // 1000  # the reference leads the echo as the canceller feeds it
    reference = np.concatenate([np.zeros(shift, np.int16), played])[: len(played)]
    aec, detector = EchoCanceller(RATE, 1, 0), DoubleTalk()
    flags, aec_out, out = [], [], []
    for k in range(len(mic) // FRAME):
        part = slice(k * FRAME, (k + 1) * FRAME)
        cleaned = aec.process(mic[part], reference[part])
        before = detector.doubletalk_hops
        out.append(detector.process(mic[part], reference[part], cleaned))
        aec_out.append(cleaned)
        flags.append(detector.doubletalk_hops - before)
    return np.array(flags), np.concatenate(aec_out), np.concatenate(out)


def _level(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.square(x.astype(np.float64))) + 1.0))


def test_fires_on_a_user_as_loud_as_the_echo_and_not_on_the_echo_alone() -> None:
    voices = Voices.from_fixtures()
    played = np.concatenate([*voices.replies, *voices.replies])
    silent = np.zeros(len(played), np.int16)
    flags, _, _ = _run(played, silent)
    assert flags.sum() <= 0.01 * 6 * len(flags), flags.sum()  # the echo alone: (almost) never

    # questions over the reply from 4 s on, each as loud as the echo where it is spoken
    echo = EchoPath(seed=3, delay_ms=DELAY_MS, jitter_ms=20.0).echo(played) * 32768
    user = silent.copy()
    spans, at = [], 4 * RATE
    for question in voices.users * 3:
        if at + len(question) > len(played):
            break
        level = np.sqrt(np.mean(np.square(echo[at : at + len(question)]))) / np.sqrt(
            np.mean(np.square(question.astype(np.float64)))
        )
        user[at : at + len(question)] = np.clip(question * level, -32768, 32767).astype(np.int16)
        spans.append((at, at + len(question)))
        at += len(question) + 3 * RATE
    assert len(spans) >= 3
    flags_dt, aec_out, out = _run(played, user)
    during = np.zeros(len(flags_dt), bool)
    onsets = []
    for a, b in spans:
        during[a // FRAME : b // FRAME + 1] = True
        onsets.append((a + first_voiced(user[a:b])) // FRAME)
    # from each question's first second of voice, most hops (Silero needs 250 ms unbroken)
    first_second = [flags_dt[k : k + RATE // FRAME].mean() / 6 for k in onsets]
    assert np.mean(first_second) >= 0.5 and sum(f >= 0.5 for f in first_second) >= len(first_second) / 2, first_second
    assert flags_dt[~during].sum() <= 0.01 * 6 * (~during).sum(), flags_dt[~during].sum()  # not between them
    # the user's voice passes louder than AEC3's suppressor left it (DoubleTalk is 10 ms behind)
    kept = [_level(out[a + 160 : b + 160]) - _level(aec_out[a:b]) for a, b in spans]
    assert min(kept) > 0 and np.mean(kept) >= 1.5, kept
