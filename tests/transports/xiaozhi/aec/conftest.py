from __future__ import annotations


class ManualClock:
    """A device clock the test moves: the device's playback and capture line up to the sample."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
