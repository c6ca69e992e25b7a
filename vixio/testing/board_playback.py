"""The simulated board of a barge-in trial (vixio/testing/barge_in.py): what it plays and what its
microphone hears, as the server pauses, resumes or interrupts the reply.

The board plays each reply frame it has been sent ~80 ms after the frame's turn (its pre-buffer),
stops at a pause or an interrupt (a real board stops at `tts stop`: `--board-stops`), and plays
what was held as a new burst with a fresh pre-buffer at a resume. Its microphone is the echo path
(`echo_path.EchoPath`) over what it played, plus the user; recomputed whole when that changes,
its past comes out the same (the path is causal and seeded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from vixio.testing.echo_path import EchoPath

if TYPE_CHECKING:
    from vixio.testing.barge_in import FrameTrace

FRAME = 960
"""60 ms at 16 kHz: the firmware's uplink frame."""


def level_db(pcm: np.ndarray) -> float:
    """Mean power of int16 `pcm` in dBFS (silence reads about -120)."""
    power = float(np.mean(np.square(pcm, dtype=np.float64))) if len(pcm) else 0.0
    return 10 * float(np.log10(max(power, 1e-3) / 32768.0**2))


class BoardPlayback:
    """What the board plays and its microphone hears, changed by the server's pause, resume and
    interrupt (`act`); the microphone is recomputed whole, and its past comes out the same
    (the echo path is causal and seeded)."""

    def __init__(
        self, path: EchoPath, played: np.ndarray, user: np.ndarray | None, reply: np.ndarray, p0: int, seed: int
    ) -> None:
        self.path, self.user, self.reply, self.p0 = path, user, reply, p0
        self.total = len(played)
        base_stamp = 1 + 60 * 1000 * (seed % 10_000)
        self.played_at = [(p0 + j * FRAME + 80, base_stamp + 60 * j) for j in range(len(reply) // FRAME)]
        self._stamps = [stamp for _, stamp in self.played_at]
        self.mic = path.mic(played, user)
        self.held = self.cancelled = False

    def levels(self, frames: list[FrameTrace]) -> None:
        """Fill in each traced frame's user-alone and echo-alone levels (the microphone as played)."""
        user = self.user if self.user is not None else np.zeros(len(self.mic), np.int16)
        for k, frame in enumerate(frames):
            mic = self.mic[k * FRAME : (k + 1) * FRAME].astype(np.int32)
            alone = user[k * FRAME : (k + 1) * FRAME].astype(np.int32)
            frame.user_db, frame.echo_db = level_db(alone), level_db(mic - alone)

    def act(self, actions: list[str], sent: int, k: int) -> bool:
        """Apply the server's actions at uplink frame `k` (`sent` reply frames sent so far: the
        board plays those out); True when what the board plays changed."""
        changed = False
        for action in actions:
            if action in ("pause", "interrupt") and not self.held and not self.cancelled:
                del self.played_at[sent:]
                changed = True
            if action == "pause":
                self.held = True
            elif action == "interrupt":
                self.held, self.cancelled = False, True
            elif action == "resume" and self.held:
                self.held = False
                start = (k + 6) * FRAME + 80  # a new burst, with a fresh pre-buffer
                self.played_at += [
                    (start + (j - sent) * FRAME, self._stamps[j]) for j in range(sent, len(self._stamps))
                ]
                changed = True
        if changed:
            played = np.zeros(self.total, np.int16)
            for j, (at, _) in enumerate(self.played_at):
                if at - 80 + FRAME <= self.total:
                    played[at - 80 : at - 80 + FRAME] = self.reply[j * FRAME : (j + 1) * FRAME]
            self.mic = self.path.mic(played, self.user)
        return changed
