"""Held speech's words in the barge-in trials: VADStation's transcription of held speech, on the
audio's clock.

The harness (testing/barge_in.py) runs faster than real time, so a transcription cannot take its
wall time there: each one is made at once (a real ASR provider, blocking) and handed to the
arbiter `latency_ms` of audio later, with the first frame after that, as the station applies
one with the first frame after it is in. One at a time, again every `partial_ms` of held speech
grown, and once more over all of it after the VAD's end, as the station does. The verdicts are
then the same on every run and on every machine; the latency is a stated model (the bench prints
the provider's measured CPU per transcription beside it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vixio.providers.asr.base import ASRProvider
from vixio.stations.interruption import Action, InterruptionArbiter

RATE = 16000


@dataclass(slots=True)
class Pending:
    text: str
    ready_at: float
    final: bool


@dataclass(slots=True)
class HeldWords:
    """One trial's transcription of held speech (`listen` once per frame while the arbiter is paused)."""

    asr: ASRProvider
    latency_ms: int = 800
    partial_ms: int = 240
    calls: int = 0
    cpu_s: float = 0.0
    """Process CPU time the transcriptions took (all the ASR's threads)."""
    heard: list[tuple[str, str]] = field(default_factory=list)
    """Every transcript handed to the arbiter and what it was judged, in order."""
    _start: int = 0
    _end: int | None = None
    _upto: int = 0
    _pending: Pending | None = None

    def paused(self, start_sample: int) -> None:
        """The arbiter paused the reply for speech from `start_sample` (its padded start)."""
        self._start, self._end, self._upto, self._pending = start_sample, None, 0, None

    def ended(self, end_sample: int | None) -> None:
        """The VAD's end of the held speech (None: it goes on again)."""
        self._end = end_sample
        if end_sample is None:
            self._upto = max(self._upto, 0)
            if self._pending is not None:
                self._pending.final = False

    def listen(
        self, arbiter: InterruptionArbiter, now: float, audio: np.ndarray, playing: Callable[[float], str]
    ) -> Action | None:
        """At audio time `now` (`audio`: the canceller's output so far): hand over a transcript
        that is due, ask for the next one; the arbiter's verdict, if any."""
        if not arbiter.listening:
            return None
        if self._pending is not None and now + 1e-9 >= self._pending.ready_at:
            pending, self._pending = self._pending, None
            action = arbiter.heard(pending.text, playing(now), final=pending.final)
            if arbiter.heard_as is not None:
                self.heard.append(arbiter.heard_as)
            if action is not None:
                return action
        if self._pending is None:
            end = self._end if self._end is not None else len(audio)
            if self._end is not None or end - self._start - self._upto >= RATE * self.partial_ms // 1000:
                if self._end is not None and self._upto == -1:
                    return None  # the final transcript was already asked for
                self._upto = -1 if self._end is not None else end - self._start
                text = self._transcribe(audio[self._start : end])
                self._pending = Pending(text, now + self.latency_ms / 1000, self._end is not None)
        return None

    def _transcribe(self, pcm: np.ndarray) -> str:
        started = time.process_time()
        text = asyncio.run(self.asr.transcribe(pcm.astype("<i2").tobytes(), RATE))
        self.cpu_s += time.process_time() - started
        self.calls += 1
        return text
