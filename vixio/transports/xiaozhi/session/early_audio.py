"""Audio that overtook its `listen start`: held briefly, then heard as the turn's first frames.

Over MQTT + UDP the firmware publishes `listen start` to the broker and streams its microphone
straight to the server's UDP port: the audio takes one hop, the message two, so the first packets
of a turn can arrive before the message that opens it. Dropped, they are the first word of
what the user said (60-120 ms of it, more behind a slow broker). A WebSocket carries both in one
ordered stream, so only channels whose audio travels apart (`SessionChannel.audio_apart`) hold it.

Bounded: at most `PACKETS` packets, each taken only if it arrived within `WINDOW_S` before the
`listen start`; `listen detect` (wake-word audio precedes it) and `listen stop` discard what is held.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

PACKETS = 16
"""About a second of 60 ms packets: more than a broker hop takes."""
WINDOW_S = 0.5
"""A packet that arrived longer before `listen start` is not this turn's (trailing audio, wake word)."""


class EarlyAudio:
    """One session's held packets: `(arrival, opus, timestamp_ms)`, oldest first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._held: deque[tuple[float, bytes, int]] = deque(maxlen=PACKETS)

    def hold(self, packet: bytes, timestamp_ms: int = 0) -> None:
        self._held.append((self._clock(), packet, timestamp_ms))

    def discard(self) -> None:
        self._held.clear()

    def take(self) -> list[tuple[bytes, int]]:
        """The packets that arrived within `WINDOW_S` before now, in arrival order; none kept."""
        since = self._clock() - WINDOW_S
        taken = [(packet, stamp) for arrived, packet, stamp in self._held if arrived >= since]
        self._held.clear()
        return taken
