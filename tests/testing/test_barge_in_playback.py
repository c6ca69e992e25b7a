"""The barge-in harness's board stops at `tts stop` and plays the rest at `tts start`, as a real one does."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.testing.barge_in import FRAME, BoardPlayback
from vixio.testing.echo_path import EchoPath

pytestmark = pytest.mark.unit


def _board() -> BoardPlayback:
    rng = np.random.default_rng(1)
    reply = (rng.standard_normal(40 * FRAME) * 6000).astype(np.int16)
    played = np.zeros(60 * FRAME, np.int16)
    played[FRAME * 2 : FRAME * 42] = reply
    return BoardPlayback(EchoPath(seed=3, delay_ms=100), played, None, reply, 2 * FRAME, seed=7)


def _level(mic: np.ndarray, k: int) -> float:
    return float(np.sqrt(np.square(mic[k * FRAME : (k + 1) * FRAME], dtype=np.float64).mean()))


def test_the_board_plays_out_what_was_sent_then_stops_and_resumes_with_the_same_stamps() -> None:
    board = _board()
    before = board.mic.copy()
    stamps = [stamp for _, stamp in board.played_at]
    assert board.act(["pause"], sent=15, k=10)
    assert board.held and len(board.played_at) == 15
    assert np.array_equal(board.mic[: 12 * FRAME], before[: 12 * FRAME])  # the past is unchanged
    assert _level(board.mic, 25) < _level(before, 25) / 30  # the echo stopped after the sent frames
    assert board.act(["resume"], sent=15, k=30)
    assert not board.held and [s for _, s in board.played_at] == stamps  # nothing skipped, nothing repeated
    assert board.played_at[15][0] == 36 * FRAME + 80  # the rest after a fresh pre-buffer
    assert _level(board.mic, 40) > _level(board.mic, 25) * 30
    assert board.act(["interrupt"], sent=20, k=40) and board.cancelled
    assert len(board.played_at) == 20
    assert not board.act(["resume"], sent=20, k=45)  # a cancelled reply stays cancelled
