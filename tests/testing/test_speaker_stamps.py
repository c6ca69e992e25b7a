"""The simulated speaker's server-AEC stamps: written-out frames feed the firmware's queue."""

from __future__ import annotations

import pytest

from vixio.testing.device.audio import ReceivedFrame, Speaker, tone
from vixio.testing.device.stamps import StampQueue
from vixio.testing.echo_path import device_stamps
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder

pytestmark = pytest.mark.unit

_PACKET = OpusEncoder(24000, 1, 60).encode(tone(0.06, sample_rate=24000))


def _play(speaker: Speaker, stamps: list[int], now: float = 0.0) -> None:
    for stamp in stamps:
        assert speaker.play(ReceivedFrame(now, "speaking", _PACKET, timestamp_ms=stamp), now) is None


def test_a_frame_takes_a_stamp_only_once_its_frame_has_been_written_out() -> None:
    speaker = Speaker(server_aec=True)
    _play(speaker, [60, 120])
    assert speaker.mic_frame_stamp(0.059) == 0  # the first frame is still playing
    assert speaker.mic_frame_stamp(0.06) == 60
    assert speaker.mic_frame_stamp(0.07) == 0
    assert speaker.mic_frame_stamp(0.5) == 120


def test_unstamped_frames_queue_nothing_and_tts_start_clears_the_queue() -> None:
    speaker = Speaker(server_aec=True)
    _play(speaker, [0, 0, 180])
    assert [speaker.mic_frame_stamp(1.0), speaker.mic_frame_stamp(1.0)] == [180, 0]
    _play(speaker, [240, 300], now=1.0)
    speaker.reset(1.5)  # ResetDecoder(): the written-out stamps are forgotten too
    assert speaker.mic_frame_stamp(2.0) == 0


def test_without_server_aec_the_microphone_is_never_stamped() -> None:
    speaker = Speaker()
    _play(speaker, [60, 120])
    assert speaker.mic_frame_stamp(1.0) == 0


def test_the_echo_path_model_and_the_speaker_share_the_rule() -> None:
    queue = StampQueue()
    for stamp in (1, 2, 3, 4):
        queue.written_out(stamp)
    assert [queue.take() for _ in range(5)] == [0, 2, 3, 4, 0]  # four queued: the first goes out as 0
    assert device_stamps([(0, 1), (0, 2), (0, 3), (0, 4)], 5, frame=960) == [0, 2, 3, 4, 0]
    assert device_stamps([(0, 0), (0, 7)], 2, frame=960) == [7, 0]  # the firmware keeps only stamps > 0
