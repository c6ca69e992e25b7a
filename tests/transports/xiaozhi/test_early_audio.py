"""EarlyAudio (session/early_audio.py): bounded, and only what arrived just before `listen start`."""

from __future__ import annotations

import pytest

from vixio.transports.xiaozhi.session.early_audio import PACKETS, WINDOW_S, EarlyAudio

pytestmark = pytest.mark.unit


def test_only_recent_packets_are_taken_at_most_packets_of_them_and_once() -> None:
    now = [100.0]
    early = EarlyAudio(clock=lambda: now[0])
    early.hold(b"old", 1)
    now[0] += WINDOW_S + 0.01
    for index in range(PACKETS + 3):
        early.hold(bytes([index]), index)
    taken = early.take()
    assert [stamp for _, stamp in taken] == list(range(3, PACKETS + 3))  # the oldest fell out, in order
    assert early.take() == []


def test_discard_forgets_everything() -> None:
    early = EarlyAudio()
    early.hold(b"wake word")
    early.discard()
    assert early.take() == []
