"""What the simulated device saw and sent, with times, and how to wait on it.

Kept apart from the device's behaviour so a test (or `--record DIR`) can inspect a whole
exchange: every JSON message in both directions, every binary frame with the reason it
was dropped, the decoded audio that was played.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from vixio.testing.device.audio import ReceivedFrame, write_wav
from vixio.testing.device.errors import DeviceDisconnected
from vixio.transports.xiaozhi.protocol.codec import resample

T = TypeVar("T")

_POLL_S = 0.02
"""Waits re-check at least this often, because playback drains with time, not events."""


@dataclass
class ReceivedMessage:
    """One JSON text message from the server."""

    time: float
    """Arrival time on the device clock (seconds)."""
    data: dict[str, Any]
    """The parsed message."""
    state: str
    """Device state when it arrived (before handling it)."""

    @property
    def type(self) -> Any:
        """The message's `type` (usually a string)."""
        return self.data.get("type")


@dataclass
class SentMessage:
    """One JSON text message the device sent."""

    time: float
    data: dict[str, Any]


class DeviceRecording:
    """Message and frame logs plus the waiting primitive built on them."""

    def __init__(self) -> None:
        """Start with empty logs."""
        self.received: list[ReceivedMessage] = []
        self.sent: list[SentMessage] = []
        self.audio_frames: list[ReceivedFrame] = []
        self.uplink_stamps: list[int] = []
        """The timestamp each uplink audio packet carried on the wire, in send order (0 in v1/v3)."""
        self._tick = asyncio.Event()

    def notify(self) -> None:
        """Wake every waiter so it re-checks its condition."""
        self._tick.set()
        self._tick = asyncio.Event()

    async def wait(
        self,
        check: Callable[[], T | None],
        timeout: float,
        *,
        describe: Callable[[], str],
        give_up: Callable[[], str | None],
    ) -> T:
        """Return the first non-None `check()`; TimeoutError after `timeout` s.

        `give_up()` returns a reason (raised as an error) when waiting can no longer succeed,
        e.g. the connection closed; `describe()` explains a timeout.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = check()
            if value is not None:
                return value
            reason = give_up()
            if reason is not None:
                raise DeviceDisconnected(f"{reason} while waiting for {describe()}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"{describe()} did not happen within {timeout:g} s")
            tick = self._tick
            try:
                await asyncio.wait_for(tick.wait(), min(remaining, _POLL_S))
            except TimeoutError:
                pass

    def find(self, type: str, state: str | None, after: int) -> dict[str, Any] | None:
        """The first received message at index >= `after` with this `type` (and `state`)."""
        for message in self.received[after:]:
            if message.type == type and (state is None or message.data.get("state") == state):
                return message.data
        return None

    def types_since(self, after: int) -> list[str]:
        """`type[:state]` of the messages received since `after`, for error messages."""
        out = []
        for message in self.received[after:]:
            state = message.data.get("state")
            out.append(f"{message.type}:{state}" if state else str(message.type))
        return out

    def decoded_audio(self, sample_rate: int) -> bytes:
        """PCM of every played frame, resampled to `sample_rate` where a hello changed the rate."""
        chunks = []
        for frame in self.audio_frames:
            if frame.played:
                pcm = frame.pcm
                if frame.sample_rate != sample_rate:
                    pcm = resample(pcm, frame.sample_rate, sample_rate)
                chunks.append(pcm)
        return b"".join(chunks)

    def drop_counts(self) -> dict[str, int]:
        """Dropped frames per reason."""
        return dict(Counter(f.drop_reason for f in self.audio_frames if f.drop_reason is not None))

    def save(self, directory: str | Path, summary: dict[str, Any], sample_rate: int) -> None:
        """Write `messages.json` (both directions, seconds since the first event) and `received.wav`."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        times = [m.time for m in self.received] + [m.time for m in self.sent] + [f.time for f in self.audio_frames]
        start = min(times, default=0.0)
        timed: list[tuple[float, dict[str, Any]]] = []
        for m in self.received:
            timed.append((m.time, {"t": round(m.time - start, 4), "dir": "in", "state": m.state, "data": m.data}))
        for s in self.sent:
            timed.append((s.time, {"t": round(s.time - start, 4), "dir": "out", "data": s.data}))
        events = [event for _, event in sorted(timed, key=lambda pair: pair[0])]
        played = [f for f in self.audio_frames if f.played]
        document = {
            **summary,
            "audio": {
                "frames": len(self.audio_frames),
                "played": len(played),
                "played_seconds": round(sum(f.duration for f in played), 3),
                "dropped": self.drop_counts(),
                "first_frame_t": round(self.audio_frames[0].time - start, 4) if self.audio_frames else None,
            },
            "messages": events,
        }
        (out / "messages.json").write_text(json.dumps(document, ensure_ascii=False, indent=1), encoding="utf-8")
        write_wav(out / "received.wav", self.decoded_audio(sample_rate), sample_rate)
