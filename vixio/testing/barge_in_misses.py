"""Why a barge-in was missed: a traced trial (`Harness(trace=True)`) sorted into its cause.

A question over the reply is missed when the reply did not stop for it within `WITHIN_S` of its
onset, or stopped only by a pause that did not end in an interrupt. Traced frame by frame
(`Trial.frames`: the microphone, the user alone, the echo alone, what the VAD heard, its
probability, the uplink stamp, the server's actions), each miss is one of:

- `echo cancelled`: the reply's own echo had cancelled it before the user spoke;
- `echo paused`: the reply's own echo had paused it and the user spoke into that pause, but their
  speech did not cancel the reply within `WITHIN_S` (`cancelled_ms`: when it did, None if never).
  When it did in time, the question is not missed (`spoke_into_pause`: it became the turn; there
  is no `tts stop` after the onset to time, so it has no latency);
- `no start`: the VAD never started while the user spoke: the canceller dimmed or distorted the
  question (`dimmed_db`: the user alone over what the VAD heard, median over the user's frames)
  so that Silero's probability never stayed up for `min_speech_ms`;
- `resumed`: the user's speech paused the reply, but it was judged a false interruption (its
  VAD segment ended before `barge_in_confirm_ms`, or its words were heard as a backchannel);
- `late`: it was interrupted, after `WITHIN_S`.

bench/bench_barge_in.py `--why-missed` prints the counts (docs/barge-in.md has them measured).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vixio.testing.barge_in import FRAME, Trial
from vixio.testing.echo_path import RATE

WITHIN_S = 1.5
"""A barge-in counts when the reply stopped for it within this of the user's onset (the bench's rule)."""
CAUSES = ("echo cancelled", "echo paused", "no start", "resumed", "late")


@dataclass(slots=True)
class Miss:
    cause: str
    dimmed_db: float
    """Median over the user's frames (user alone above -35 dBFS) of user alone minus VAD input, dB."""
    user_over_echo_db: float
    """Median over the same frames of the user alone over the echo alone at the microphone, dB."""
    max_vad: float
    """The VAD's highest probability from the user's onset to `WITHIN_S` after it."""
    cancelled_ms: float | None = None
    """`echo paused`: from the user's onset to the reply's cancel, when that came within `WITHIN_S`."""


def missed(trial: Trial) -> bool:
    """A question over the reply that the reply did not stop for in time (the bench's count)."""
    if trial.kind != "barge" or trial.onset_s is None:
        return False
    stopped = trial.stopped_s is not None and trial.stopped_s - trial.onset_s <= WITHIN_S
    return not (stopped and trial.confirmed) and not spoke_into_pause(trial)


def spoke_into_pause(trial: Trial) -> bool:
    """The reply's echo had paused it before the user spoke (no `tts stop` after their onset to
    time) and their speech cancelled it within `WITHIN_S`: their question became the turn, so it
    was not missed, though it has no latency to count."""
    if trial.kind != "barge" or trial.onset_s is None or trial.stopped_s is not None:
        return False
    return trial.cancelled_s is not None and trial.cancelled_s - trial.onset_s <= WITHIN_S


def why_missed(trial: Trial) -> Miss | None:
    """The cause of a traced trial's miss; None when it was not missed (or not traced)."""
    if not missed(trial) or not trial.frames or trial.onset_s is None:
        return None
    onset = int(trial.onset_s * RATE) // FRAME
    within = onset + int(WITHIN_S * RATE) // FRAME
    before = [a for frame in trial.frames[:onset] for a in frame.actions]
    after = [a for frame in trial.frames[onset:] for a in frame.actions]
    speech = [f for f in trial.frames[onset:within] if f.user_db > -35.0]
    dimmed = float(np.median([f.user_db - f.out_db for f in speech])) if speech else 0.0
    ser = float(np.median([f.user_db - f.echo_db for f in speech])) if speech else 0.0
    peak = max((f.vad for f in trial.frames[onset:within]), default=0.0)
    last_before = next((a for a in reversed(before) if a in ("pause", "resume", "interrupt")), None)
    cancelled = None
    if last_before == "interrupt":
        cause = "echo cancelled"
    elif last_before == "pause":
        cause = "echo paused"
        at = next((k for k, f in enumerate(trial.frames[onset:within]) if "interrupt" in f.actions), None)
        cancelled = None if at is None else (at + 1) * FRAME * 1000 / RATE
    elif "pause" not in after:
        cause = "no start"
    elif "interrupt" not in after:
        cause = "resumed"
    else:
        cause = "late"
    return Miss(cause, round(dimmed, 1), round(ser, 1), round(peak, 2), cancelled)
