"""A traced barge-in trial is sorted into why it was missed; the board's levels split user and echo."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.testing.barge_in import FRAME, BoardPlayback, FrameTrace, Trial, level_db
from vixio.testing.barge_in_misses import missed, spoke_into_pause, why_missed
from vixio.testing.echo_path import RATE, EchoPath

pytestmark = pytest.mark.unit

ONSET_FRAME = 20


def _trial(actions: dict[int, list[str]], *, user_db: float = -20.0, out_db: float = -20.0, **result: object) -> Trial:
    """A question from frame ONSET_FRAME to ONSET_FRAME + 15 over a reply whose echo is at -20 dBFS."""
    frames = []
    for k in range(80):
        speaking = ONSET_FRAME <= k < ONSET_FRAME + 15
        frames.append(
            FrameTrace(
                stamp=60 * k + 1,
                mic_db=-15.0,
                out_db=out_db if speaking else -60.0,
                vad=0.3 if speaking else 0.0,
                actions=actions.get(k, []),
                user_db=user_db if speaking else -120.0,
                echo_db=-20.0,
            )
        )
    trial = Trial(kind="barge", barge_in=True, onset_s=ONSET_FRAME * FRAME / RATE, frames=frames)
    for key, value in result.items():
        setattr(trial, key, value)
    return trial


def test_a_question_the_vad_never_started_on_is_no_start_with_its_dimming() -> None:
    miss = why_missed(_trial({}, user_db=-20.0, out_db=-32.0))
    assert miss is not None and miss.cause == "no start"
    assert miss.dimmed_db == 12.0 and miss.user_over_echo_db == 0.0 and miss.max_vad == 0.3


def test_a_question_spoken_into_the_echos_pause_or_after_its_cancel_is_the_echos() -> None:
    trial = _trial({5: ["pause"], ONSET_FRAME + 3: ["interrupt"]}, confirmed=True)
    miss = why_missed(trial)
    assert miss is not None and miss.cause == "echo paused"
    assert miss.cancelled_ms == 4 * FRAME * 1000 / RATE  # the user's speech cancelled the silent reply
    never = why_missed(_trial({5: ["pause"]}))
    assert never is not None and never.cause == "echo paused" and never.cancelled_ms is None
    cancelled = why_missed(_trial({5: ["pause"], 12: ["interrupt"]}))
    assert cancelled is not None and cancelled.cause == "echo cancelled"
    # an echo pause that resumed before the user spoke is not the cause
    resumed_first = _trial({5: ["pause"], 12: ["resume"]})
    assert why_missed(resumed_first).cause == "no start"  # type: ignore[union-attr]


def test_a_question_whose_speech_cancelled_a_reply_its_echo_had_paused_is_heard_without_a_latency() -> None:
    onset = ONSET_FRAME * FRAME / RATE
    in_time = _trial({5: ["pause"], ONSET_FRAME + 3: ["interrupt"]}, confirmed=True, cancelled_s=onset + 0.24)
    assert spoke_into_pause(in_time) and not missed(in_time) and why_missed(in_time) is None
    too_late = _trial({5: ["pause"], ONSET_FRAME + 30: ["interrupt"]}, confirmed=True, cancelled_s=onset + 1.8)
    assert not spoke_into_pause(too_late) and why_missed(too_late).cause == "echo paused"  # type: ignore[union-attr]
    # a pause after the onset is timed as a barge-in, not counted here
    timed = _trial({ONSET_FRAME + 5: ["pause"]}, stopped_s=onset + 0.3, confirmed=True, cancelled_s=onset + 0.9)
    assert not spoke_into_pause(timed) and not missed(timed)


def test_a_paused_question_judged_false_is_resumed_and_a_slow_verdict_is_late() -> None:
    paused = _trial({ONSET_FRAME + 5: ["pause"], ONSET_FRAME + 30: ["resume"]}, stopped_s=(ONSET_FRAME + 5) * 0.06)
    assert why_missed(paused).cause == "resumed"  # type: ignore[union-attr]
    late = _trial(
        {ONSET_FRAME + 30: ["pause"], ONSET_FRAME + 38: ["interrupt"]},
        stopped_s=(ONSET_FRAME + 31) * 0.06,
        confirmed=True,
    )
    assert missed(late) and why_missed(late).cause == "late"  # type: ignore[union-attr]


def test_a_heard_question_or_an_echo_only_reply_is_not_a_miss() -> None:
    heard = _trial({ONSET_FRAME + 5: ["pause"], ONSET_FRAME + 12: ["interrupt"]}, confirmed=True)
    heard.stopped_s = (ONSET_FRAME + 6) * FRAME / RATE
    assert not missed(heard) and why_missed(heard) is None
    echo = _trial({5: ["pause"], 30: ["resume"]})
    echo.kind, echo.onset_s = "echo", None
    assert why_missed(echo) is None


def test_the_boards_levels_split_the_microphone_into_user_and_echo() -> None:
    rng = np.random.default_rng(2)
    reply = (rng.standard_normal(30 * FRAME) * 6000).astype(np.int16)
    played = np.zeros(50 * FRAME, np.int16)
    played[2 * FRAME : 32 * FRAME] = reply
    user = np.zeros(50 * FRAME, np.int16)
    t = np.arange(10 * FRAME) / RATE
    user[36 * FRAME : 46 * FRAME] = (0.25 * 32767 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    board = BoardPlayback(EchoPath(seed=3, delay_ms=100), played, user, reply, 2 * FRAME, seed=7)
    frames = [FrameTrace(0, 0.0, 0.0, 0.0, []) for _ in range(50)]
    board.levels(frames)
    assert frames[40].user_db == pytest.approx(level_db(user[40 * FRAME : 41 * FRAME]), abs=0.01)
    assert frames[40].user_db == pytest.approx(-15.1, abs=0.2)  # a 0.25 full-scale sine
    assert frames[40].echo_db < -55  # the reply ended 8 frames before: noise only
    assert frames[15].user_db < -119 and frames[15].echo_db > -40  # the reply's echo alone
