"""LogThrottle: the first few occurrences of a repeated event are logged, then a periodic count.

A peer that sends 15,000 bad frames must not write 15,000 log lines: the first `first` events
are logged in full, after that at most one summary line per `every` seconds says how many were
suppressed since the last line.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LogThrottle:
    """Decides which occurrences of one kind of event get a log line."""

    def __init__(self, first: int = 5, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.first = first
        """Occurrences logged in full before throttling starts."""
        self.every = every
        """Seconds between summary lines once throttling."""
        self.total = 0
        """Occurrences seen so far."""
        self._clock = clock
        self._suppressed = 0
        self._last_summary = 0.0

    def hit(self) -> int | None:
        """Count one occurrence. Returns 0 when it should be logged in full, N > 0 when a summary
        line for N occurrences (this one included) is due, None when it stays silent."""
        self.total += 1
        if self.total <= self.first:
            if self.total == self.first:
                self._last_summary = self._clock()
            return 0
        self._suppressed += 1
        now = self._clock()
        if now - self._last_summary >= self.every:
            count, self._suppressed, self._last_summary = self._suppressed, 0, now
            return count
        return None

    def pending(self) -> int:
        """Occurrences suppressed since the last line (for a closing summary)."""
        return self._suppressed
