"""Alignment of the uplink with what the server sent: reference ring, timestamp clock, delay."""

from __future__ import annotations

import numpy as np
import pytest

from vixio.testing.echo_path import EchoPath, device_stamps
from vixio.transports.xiaozhi.aec.alignment import DelayEstimator, DownlinkReference, UplinkClock, gcc_phat

pytestmark = pytest.mark.unit

RATE = 16000


def _noise(n: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 4000).astype(np.int16)


def test_reference_reads_what_was_sent_and_forgets_beyond_its_size() -> None:
    ref = DownlinkReference(seconds=0.5)
    audio = _noise(RATE)
    for j in range(0, RATE, 960):
        ref.add(1 + j // 16, audio[j : j + 960])
    assert ref.where(1 + 14400 // 16) == 14400
    start = ref.position - 4000
    assert np.array_equal(ref.read(start, 4000), audio[start : ref.position])
    assert ref.where(1) is None  # older than the ring keeps
    assert not ref.read(0, 100).any()  # forgotten audio reads as silence
    assert not ref.read(ref.position, 50).any()  # not sent yet


def test_reference_is_bounded_whatever_the_stamps() -> None:
    ref = DownlinkReference(seconds=0.2)
    for stamp in range(5000):
        ref.add(stamp, np.zeros(160, np.int16))
    assert len(ref._stamps) <= 300 and len(ref._order) <= 256


def test_uplink_clock_follows_the_median_and_restarts_on_a_new_reply() -> None:
    clock = UplinkClock()
    for k, jitter in enumerate([0, 960, 0, 0, -960, 0, 0]):
        clock.observe(k * 960, k * 960 - 5000 + jitter)
    assert clock.offset == -5000  # single early or late stamps do not move it
    clock.observe(100 * 960, 20_000)  # the next reply: the downlink clock stood still meanwhile
    assert clock.offset == 20_000 - 100 * 960


@pytest.mark.parametrize("delay_ms", [40, 120, 250])
def test_gcc_phat_finds_the_echo_delay_through_the_echo_path(delay_ms: int) -> None:
    played = _noise(3 * RATE, seed=delay_ms)
    mic = EchoPath(seed=1, delay_ms=delay_ms, jitter_ms=0).mic(played)
    span = int(0.48 * RATE)  # ref starts 400 ms before mic: the estimator's max_lag
    max_lag = int(0.4 * RATE)
    window = slice(RATE, RATE + int(1.5 * RATE) // 2)
    ref = np.concatenate([np.zeros(max_lag, np.int16), played])[window.start : window.stop + span]
    shift, confidence = gcc_phat(mic[window], ref, span)
    assert abs((max_lag - shift) - delay_ms * 16) <= 8, (shift, confidence)
    assert confidence > 4


def test_delay_estimator_needs_two_agreeing_estimates_to_move() -> None:
    est = DelayEstimator(min_confidence=0.0)
    played = _noise(4 * RATE, seed=3)

    def estimate(delay: int) -> int | None:
        mic = np.concatenate([np.zeros(delay, np.int16), played])[: len(played)]
        first = 2 * RATE
        m = mic[first : first + est.window]
        r = played[first - est.max_lag : first - est.max_lag + est.window + est.max_lag - est.min_lag]
        return est.update(m, r)

    assert estimate(1600) is None  # one estimate is not yet a delay
    assert estimate(1600) == 1600
    assert estimate(3200) == 1600  # a lone outlier (double-talk, noise) does not move it
    assert estimate(3200) == 3200  # two in a row do: the device's delay really changed
    moved = estimate(3230)
    assert moved is not None and 3200 < moved <= 3230  # small wander is followed smoothly


def test_device_stamps_follow_the_firmware_queue() -> None:
    played = [(960 * j, 100 + 60 * j) for j in range(5)]
    stamps = device_stamps(played, 8, frame=960, phase=10)
    assert stamps[:5] == [100, 160, 220, 280, 340]
    assert stamps[5:] == [0, 0, 0]  # nothing played: the firmware sends 0
    burst = device_stamps([(0, 1), (0, 2), (0, 3), (0, 4)], 2, frame=960)
    assert burst == [0, 2]  # more than 3 queued: the frame goes out unstamped, the stamp is dropped


def test_a_new_reply_takes_a_whole_frame_shift_of_the_delay_at_once() -> None:
    est = DelayEstimator(min_confidence=0.0)
    played = _noise(4 * RATE, seed=4)

    def estimate(delay: int) -> int | None:
        window = est.current_window
        mic = np.concatenate([np.zeros(delay, np.int16), played])[: len(played)]
        first = 2 * RATE
        m = mic[first : first + window]
        r = played[first - est.max_lag : first - est.max_lag + window + est.max_lag - est.min_lag]
        return est.update(m, r)

    estimate(2400)
    assert estimate(2400) == 2400
    est.reacquire(960)
    assert est.reacquiring and est.current_window < est.window
    assert estimate(2400 - 960) == 2400 - 960  # the stamps moved by a frame: taken at once
    assert not est.reacquiring
    assert estimate(4000) == 2400 - 960  # afterwards a lone outlier does not move it again
    est.reacquire(960)
    assert estimate(4700) == 2400 - 960  # not a whole-frame shift: needs a second estimate to agree
    assert estimate(4700) == 4700


def test_reference_reads_match_what_was_sent_across_the_rings_wrap() -> None:
    ref = DownlinkReference(seconds=0.1)  # 1600 samples: the reads below cross its end often
    audio = _noise(6000, seed=7)
    for j in range(0, 6000, 960):
        ref.add(1 + j, audio[j : j + 960])
    sent = len(audio)
    for start in range(sent - 2400, sent + 200, 37):
        expect = np.zeros(700, np.int16)
        lo, hi = max(start, sent - 1600), min(start + 700, sent)
        if lo < hi:
            expect[lo - start : hi - start] = audio[lo:hi]
        assert np.array_equal(ref.read(start, 700), expect), start
