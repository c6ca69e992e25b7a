"""TurnDetectorStation: decides where a user turn starts and ends.

- auto/realtime: a turn is one VAD utterance (its end is the VAD's silence window); utterances
  shorter than `min_speech_ms` (a cough, a click) are not turns;
- manual (push-to-talk): the turn runs from `listen start` to `listen stop`, whatever the VAD
  says in between;
- a pause (`VADPauseChunk`) inside an auto turn long enough to be one is passed on (a
  preemptive turn may start there), and so is the speech that resumes after it; elsewhere both
  are dropped;
- typed text (`listen detect`) is a turn on its own and needs no decision: it passes through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from vixio.core.chunk import (
    AudioChunk,
    Chunk,
    TurnEndChunk,
    TurnStartChunk,
    VADEndChunk,
    VADPauseChunk,
    VADResumeChunk,
    VADStartChunk,
)
from vixio.core.station import Station


class TurnDetectorStation(Station):
    handles = (VADStartChunk, VADEndChunk, VADPauseChunk, VADResumeChunk, TurnStartChunk, TurnEndChunk, AudioChunk)
    inline = True  # pure bookkeeping, no awaits: runs in the VAD's task

    def __init__(self, *, min_speech_ms: int = 300, name: str | None = None) -> None:
        super().__init__(name)
        self.min_speech_ms = min_speech_ms
        self._push_to_talk = False
        self._in_turn = False
        self._speech_seconds = 0.0

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, AudioChunk):
            if chunk.role == "user" and not self._in_turn:
                return  # speech outside any turn (e.g. after push-to-talk release) is dropped
            self._speech_seconds += chunk.duration
            yield chunk
        elif isinstance(chunk, TurnStartChunk):
            self._push_to_talk = chunk.source == "push_to_talk"
            self._start()
            yield chunk
        elif isinstance(chunk, TurnEndChunk):
            was_push_to_talk, self._push_to_talk = self._push_to_talk, False
            if self._in_turn or was_push_to_talk:
                self._in_turn = False
                yield chunk
        elif isinstance(chunk, VADPauseChunk | VADResumeChunk):
            # The end of a turn too short to count is dropped, so a pause in one must be too.
            if not self._push_to_talk and self._in_turn and self._speech_seconds * 1000 >= self.min_speech_ms:
                yield chunk
        elif isinstance(chunk, VADStartChunk):
            yield chunk
            if not self._push_to_talk and not self._in_turn:
                self._start()
                yield TurnStartChunk(source="vad")
        elif isinstance(chunk, VADEndChunk):
            yield chunk
            if not self._push_to_talk and self._in_turn:
                self._in_turn = False
                if self._speech_seconds * 1000 >= self.min_speech_ms:
                    yield TurnEndChunk(source="vad", created_at=chunk.created_at)  # the deciding frame's arrival
                else:
                    self.logger.debug("ignored {:.0f} ms of speech: too short for a turn", self._speech_seconds * 1000)

    def _start(self) -> None:
        self._in_turn = True
        self._speech_seconds = 0.0
