"""The barge-in benchmark, small (10 replies on two simulated boards): a regression fails CI.

Every part is seeded (echo path, voices, stamps, Opus, AEC3, Silero), so the figures are the same
on every run; the bounds leave room for a library update, not for a regression. The same trials
with today's rule (VAD start = barge-in, no AEC) must fail them, so the test can fail.
"""

from __future__ import annotations

import statistics

import pytest

pytestmark = pytest.mark.models

pytest.importorskip("pywebrtc_audio", reason="needs vixio[aec]")


def _trials(aec: bool, count: int) -> list:
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD
    from vixio.testing.barge_in import Harness, Voices

    harness = Harness(SileroOnnxVAD(16000), Voices.from_fixtures(), aec=aec, arbiter=aec)
    return [harness.trial(i, barge_in=i % 2 == 1) for i in range(count)]


def test_server_aec_keeps_the_reply_from_interrupting_itself_and_hears_the_user() -> None:
    trials = _trials(aec=True, count=10)
    echo = [t for t in trials if not t.barge_in]
    barge = [t for t in trials if t.barge_in]
    assert sum(1 for t in echo if t.false_cancels) == 0, "the reply's echo cancelled a reply"
    assert sum(1 for t in echo if t.false_events) == 0, [t.false_events for t in echo]
    # nor did a reply pause on its echo before its user spoke (a session's first replies, while
    # the canceller finds the board's delay, are where this went wrong)
    assert sum(t.false_events for t in barge) == 0, [t.false_events for t in barge]
    heard = [t for t in barge if t.confirmed and t.stopped_s is not None and t.stopped_s - t.onset_s <= 1.5]
    assert len(heard) >= 4, "a user's question over the reply was missed"
    assert statistics.median(1000 * (t.stopped_s - t.onset_s) for t in heard) <= 700
    erle = [t.erle_db for t in echo if t.erle_db is not None]
    assert statistics.median(erle) >= 18.0, erle
    assert min(erle) >= 12.0, erle  # no reply left to a canceller that lost the echo


def test_coughs_over_the_reply_do_not_cancel_it() -> None:
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD
    from vixio.testing.barge_in import Harness, Voices

    harness = Harness(SileroOnnxVAD(16000), Voices.from_fixtures(), aec=True, arbiter=True)
    trials = [harness.trial(100_000 + 3 * i, kind="cough") for i in range(4)]
    assert not [t for t in trials if t.confirmed or t.false_cancels], "a cough cancelled the reply"


def test_without_aec_the_same_replies_interrupt_themselves() -> None:
    echo = [t for t in _trials(aec=False, count=3) if not t.barge_in]
    assert all(t.false_cancels for t in echo)


def test_words_tell_a_command_from_a_backchannel_over_the_reply() -> None:
    """Ten seeded short utterances over a reply on a board that stops at `tts stop`, held speech
    transcribed by faster-whisper tiny.en (`vad.barge_in_words`): "Stop."/"Wait." cancel the
    reply; length alone lets most of them resume it (they are as short as "Okay.")."""
    pytest.importorskip("faster_whisper", reason="needs vixio[whisper]")
    pytest.importorskip("piper", reason="needs vixio[piper]")
    from vixio.providers.asr.faster_whisper import FasterWhisperASR
    from vixio.providers.vad.silero_onnx import SileroOnnxVAD
    from vixio.testing.barge_in import Harness, Voices

    voices = Voices.from_fixtures(short=True)

    def run(asr: FasterWhisperASR | None) -> tuple[int, int, list[list[tuple[str, str]]]]:
        harness = Harness(SileroOnnxVAD(16000), voices, aec=True, arbiter=True, asr=asr, board_stops=True)
        trials = [harness.trial(200_000 + i, kind=("backchannel", "command")[i % 2]) for i in range(10)]
        stopped = sum(
            1
            for t in trials
            if t.kind == "command" and t.confirmed and t.stopped_s is not None and t.stopped_s - t.onset_s <= 1.5
        )
        cancelled = sum(1 for t in trials if t.kind == "backchannel" and (t.confirmed or t.false_cancels))
        return stopped, cancelled, [t.heard for t in trials]

    stopped, cancelled, heard = run(FasterWhisperASR("tiny.en"))
    assert stopped >= 4, heard  # of 5 commands (one never reaches the VAD: AEC3 dims it)
    assert cancelled <= 2, heard  # of 5 backchannels
    assert any(verdict == "command" for said in heard for _, verdict in said)
    by_length, _, _ = run(None)
    assert by_length <= 2  # the same commands judged by their length
