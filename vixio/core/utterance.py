"""The audio a recogniser hears of an utterance: decided by the speech in it, not by where it was cut.

The VAD cuts an utterance on its window grid (32 ms windows over 60 ms device frames, so the cut
moves with the phase of the two), with a pre-roll, and a pause's draft stops 150 ms into the
silence where the turn's end stops 100 ms past the speech. Whisper tiny.en heard the same espeak
sentence ("Set an alarm for seven in the morning") as 9 different sentences over 16 such cuts
(leading silence 0-140 ms in 20 ms steps, trailing 150 or 500 ms): the same WAV played twice came
back with different words. `speech_span` gives every cut of the same speech the same samples: from
its first to its last sample at `FLOOR` of its peak, between fixed stretches of digital silence
(measured: 1 sentence over the same 16 cuts).
"""

from __future__ import annotations

import numpy as np

FLOOR = 0.02
"""Of the utterance's peak (-34 dB): quieter samples at its edges are silence, louder ones speech."""
MIN_PEAK = 64
"""An utterance whose peak is under this (-54 dBFS) is passed on as it is: there is no speech to find."""
PAD_SECONDS = 0.2
"""Digital silence before and after the speech (Whisper likes a little lead-in and tail)."""


def speech_span(pcm: bytes, sample_rate: int) -> bytes:
    """`pcm` (mono int16) from its first to its last sample at `FLOOR` of its peak, with `PAD_SECONDS`
    of zeros either side: the same speech gives the same samples wherever it was cut."""
    samples = np.frombuffer(pcm, dtype="<i2", count=len(pcm) // 2)
    if samples.size == 0:
        return pcm
    level = np.abs(samples.astype(np.int32))
    peak = int(level.max())
    if peak < MIN_PEAK:
        return pcm
    loud = np.flatnonzero(level >= peak * FLOOR)
    pad = np.zeros(round(sample_rate * PAD_SECONDS), dtype="<i2")
    return np.concatenate([pad, samples[loud[0] : loud[-1] + 1], pad]).astype("<i2", copy=False).tobytes()
