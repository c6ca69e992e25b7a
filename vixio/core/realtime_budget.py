"""RealTimeBudget: media a peer may send no faster than it plays, plus a bounded burst.

A device streams its microphone in real time; after a Wi-Fi stall it may send its backlog at
once (the Xiaozhi firmware queues at most ~2.4 s). A client streaming faster than that for long
is not a microphone: without a bound it makes the server decode and score (VAD) several
sessions' worth of audio. The budget holds `burst` seconds, refills at one second per second,
and each packet takes its duration; a packet it cannot pay for is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RealTimeBudget:
    """Seconds of media a peer may still send ahead of real time (a token bucket)."""

    def __init__(self, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if burst <= 0:
            raise ValueError(f"burst must be positive seconds, got {burst}")
        self.burst = burst
        self.refused = 0
        """Packets refused so far."""
        self._clock = clock
        self._credit = burst
        self._last = clock()

    def take(self, seconds: float) -> bool:
        """Pay for `seconds` of media; False (nothing paid) when the peer is too far ahead."""
        now = self._clock()
        self._credit = min(self.burst, self._credit + (now - self._last))
        self._last = now
        if seconds > self._credit:
            self.refused += 1
            return False
        self._credit -= seconds
        return True
