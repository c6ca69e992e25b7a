"""The uplink timestamps of firmware built with `CONFIG_USE_SERVER_AEC`: one queue, one rule.

Read in 78/xiaozhi-esp32 at 48142026 (2026-08-08), `main/audio/audio_service.cc`:

- `AudioOutputTask`: after `codec_->OutputData(task->pcm)` returns (the speaker has written the
  frame out), `#if CONFIG_USE_SERVER_AEC` it does `timestamp_queue_.push_back(task->timestamp)`
  when `task->timestamp > 0`; the decode task copied that stamp from the v2 packet.
- `PushTaskToEncodeQueue(kAudioTaskTypeEncodeToSendQueue, ...)` (each 60 ms microphone frame the
  audio engine outputs): with the queue non-empty the frame takes `timestamp_queue_.front()` if
  `size() <= MAX_TIMESTAMPS_IN_QUEUE` (3, `audio_service.h`), else it keeps 0 and logs "dropping
  timestamp"; either way the front is popped.
- `ResetDecoder()` (entering speaking) clears the queue; wake-word packets
  (`PopWakeWordPacket`) are built with timestamp 0 and never take one.
- `main/protocols/websocket_protocol.cc` `SendAudio`: v2 writes `htonl(packet->timestamp)` into
  the header; v1 and v3 have no field for it.

`StampQueue` is that queue; the simulated device's speaker feeds it in real time and
`echo_path.device_stamps` feeds it from a precomputed play-out, so both stamp by the same rule.
"""

from __future__ import annotations

from collections import deque

MAX_TIMESTAMPS_IN_QUEUE = 3
"""More queued stamps than this and the next microphone frame goes out as 0 (FW `MAX_TIMESTAMPS_IN_QUEUE`)."""


class StampQueue:
    """The firmware's `timestamp_queue_`: stamps of written-out downlink frames, oldest first."""

    def __init__(self, max_queued: int = MAX_TIMESTAMPS_IN_QUEUE) -> None:
        """An empty queue; with more than `max_queued` stamps waiting a frame takes 0."""
        self.max_queued = max_queued
        # The firmware's queue is unbounded; it only grows while frames play and the microphone
        # is off (auto mode), and the next `tts start` clears it. Ours drops the oldest beyond
        # 4096 (4 min of 60 ms frames), which changes no stamp: past 3 queued, frames take 0.
        self._stamps: deque[int] = deque(maxlen=4096)

    def __len__(self) -> int:
        return len(self._stamps)

    def written_out(self, stamp: int) -> None:
        """The speaker wrote out a frame stamped `stamp`; stamp 0 (v1/v3, unstamped) is not kept."""
        if stamp > 0:
            self._stamps.append(stamp)

    def take(self) -> int:
        """The stamp of the next microphone frame: the oldest queued one, or 0 (empty or overfull)."""
        if not self._stamps:
            return 0
        stamp = self._stamps[0] if len(self._stamps) <= self.max_queued else 0
        self._stamps.popleft()
        return stamp

    def clear(self) -> None:
        """`ResetDecoder()`: forget every queued stamp."""
        self._stamps.clear()
