"""Audio side of the simulated device: the playback queue model, uplink encoding, WAV I/O.

The firmware (FW `main/audio/audio_service.cc`) keeps a decode queue of at most
2400 ms / 60 ms = 40 Opus packets and pushes into it without waiting, so a packet that
arrives while 40 are waiting is dropped. A decoder task takes packets one at a time and
the speaker consumes their PCM in real time. `PlaybackQueue` models that with arrival
times instead of a task, which makes it exact and cheap to test.

Built with server AEC (`Speaker(server_aec=True)`, the firmware's `CONFIG_USE_SERVER_AEC`), the
speaker also hands each played frame's v2 timestamp to a `StampQueue` when the frame has been
written out (the end of its play in this model), and each microphone frame takes its stamp from
there (`Speaker.mic_frame_stamp`); `stamps.py` cites the firmware.
"""

from __future__ import annotations

import math
import wave
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from vixio.testing.device.stamps import StampQueue
from vixio.transports.xiaozhi.protocol.codec import (
    UPLINK_SAMPLE_RATE,
    CodecError,
    FrameSplitter,
    OpusDecoder,
    OpusEncoder,
    resample,
)

MAX_DECODE_QUEUE_PACKETS = 40
"""Packets that may wait behind the one being played; more are dropped (FW `MAX_DECODE_PACKETS_IN_QUEUE`)."""

WAKE_WORD_AUDIO_SECONDS = 2.0
"""The firmware caches the last 2 s of wake-word audio (`wake_word_audio_cache_.Initialize(16000*2)`)."""

DropReason = Literal["not_speaking", "queue_full", "bad_framing", "empty", "decode_error", "too_long", "decoder_reset"]
"""Why a received binary frame was not played.

- `not_speaking`: the device was not in `speaking` (no `tts start` yet, or after `tts stop`).
- `queue_full`: 40 packets were already waiting.
- `bad_framing`: the v2/v3 header did not parse.
- `empty`: a zero-length Opus payload.
- `decode_error`: libopus rejected the packet.
- `too_long`: the packet decodes to more samples than the announced `frame_duration`;
  the firmware's decode buffer is sized for exactly that duration.
- `decoder_reset`: accepted, but a later `tts start` cleared the queue before it played.
"""


@dataclass
class ReceivedFrame:
    """One binary WebSocket message from the server and what the device did with it."""

    time: float
    """Arrival time on the device clock (seconds)."""
    state: str
    """Device state when it arrived."""
    payload: bytes = field(repr=False)
    """The Opus packet (the frame without its v2/v3 header)."""
    frame_type: int = 0
    """v2/v3 frame type; the firmware ignores it and treats everything as Opus."""
    timestamp_ms: int = 0
    """v2 timestamp, else 0."""
    played: bool = False
    """True if the packet was (or is going to be) played."""
    drop_reason: DropReason | None = None
    """Why it was not played; None when played."""
    queue_depth: int = 0
    """Packets waiting in the decode queue when this one arrived."""
    sample_rate: int = 24000
    """Decoder output rate at arrival (the server hello's `sample_rate`)."""
    pcm: bytes = field(default=b"", repr=False)
    """Decoded int16 PCM when played."""

    @property
    def duration(self) -> float:
        """Seconds of decoded audio (0 when not decoded)."""
        return len(self.pcm) / 2 / self.sample_rate


class PlaybackQueue:
    """The firmware decode queue plus speaker, modelled from arrival times.

    Each accepted packet starts playing when the previous one ends (or on arrival when
    the speaker is quiet). A packet counts as waiting until it starts; the few packets
    the firmware holds in its post-decode playback queue are folded into that, so limits
    are exact to within a frame or two.
    """

    def __init__(self, max_packets: int = MAX_DECODE_QUEUE_PACKETS) -> None:
        """Create an empty queue that holds at most `max_packets` waiting packets."""
        self.max_packets = max_packets
        self._waiting: deque[tuple[float, ReceivedFrame]] = deque()
        self._busy_until = -math.inf

    def depth(self, now: float) -> int:
        """Packets still waiting (not yet started) at `now`."""
        while self._waiting and self._waiting[0][0] <= now:
            self._waiting.popleft()
        return len(self._waiting)

    def is_full(self, now: float) -> bool:
        """True when a packet arriving at `now` would be dropped."""
        return self.depth(now) >= self.max_packets

    def push(self, frame: ReceivedFrame, duration: float, now: float) -> None:
        """Schedule `frame` (lasting `duration` s) after everything already queued."""
        start = max(now, self._busy_until)
        self._busy_until = start + duration
        self._waiting.append((start, frame))

    def reset(self, now: float) -> list[ReceivedFrame]:
        """Clear the queue like `ResetDecoder()`; returns the frames that never started."""
        self.depth(now)
        cut = [frame for _, frame in self._waiting]
        self._waiting.clear()
        self._busy_until = min(self._busy_until, now)
        return cut

    def drained_at(self) -> float:
        """Time at which the speaker falls silent (−inf if nothing was ever queued)."""
        return self._busy_until

    def is_playing(self, now: float) -> bool:
        """True while queued audio is still playing at `now`."""
        return self._busy_until > now


class Speaker:
    """What the firmware does with a downlink packet while speaking: queue limit, decode, play."""

    def __init__(self, *, server_aec: bool = False) -> None:
        """A quiet speaker at the protocol defaults (24 kHz, 60 ms); `server_aec` keeps the
        stamps of written-out frames for the uplink, as `CONFIG_USE_SERVER_AEC` firmware does."""
        self.queue = PlaybackQueue()
        self.sample_rate = 24000
        self.frame_duration_ms = 60
        self.stamps = StampQueue() if server_aec else None
        self._decoder: OpusDecoder | None = None
        # (written-out time, stamp) of queued frames not yet written out; at most the queue's
        # 40 waiting packets plus the one playing.
        self._unwritten: deque[tuple[float, int]] = deque()

    def configure(self, sample_rate: int, frame_duration_ms: int) -> None:
        """Follow a server hello's `audio_params`; the decoder is rebuilt at the new rate."""
        self.sample_rate, self.frame_duration_ms = sample_rate, frame_duration_ms
        self._decoder = None

    def reset(self, now: float) -> None:
        """`ResetDecoder()` on entering speaking: packets not yet played are discarded."""
        for frame in self.queue.reset(now):
            frame.played, frame.drop_reason = False, "decoder_reset"
        self._decoder = None
        # ResetDecoder() clears the timestamp queue too; the frame cut mid-play is never written out.
        self._unwritten.clear()
        if self.stamps is not None:
            self.stamps.clear()

    def mic_frame_stamp(self, now: float) -> int:
        """The v2 timestamp of a microphone frame captured at `now` (0 without server AEC)."""
        if self.stamps is None:
            return 0
        self._write_out(now)
        return self.stamps.take()

    def _write_out(self, now: float) -> None:
        assert self.stamps is not None
        while self._unwritten and self._unwritten[0][0] <= now:
            self.stamps.written_out(self._unwritten.popleft()[1])

    def play(self, frame: ReceivedFrame, now: float) -> DropReason | None:
        """Queue `frame` for playback; returns why it was dropped, or None (`frame.pcm` is set)."""
        frame.sample_rate = self.sample_rate
        frame.queue_depth = self.queue.depth(now)
        if frame.queue_depth >= self.queue.max_packets:
            return "queue_full"
        if not frame.payload:
            return "empty"
        try:
            if self._decoder is None:
                self._decoder = OpusDecoder(self.sample_rate, 1)
            pcm = self._decoder.decode(frame.payload)
        except (CodecError, ValueError):
            return "decode_error"
        # The firmware's decode buffer holds exactly one announced frame.
        if len(pcm) // 2 > self.sample_rate * self.frame_duration_ms // 1000:
            return "too_long"
        frame.pcm = pcm
        self.queue.push(frame, frame.duration, now)
        if self.stamps is not None:
            self._write_out(now)  # keeps `_unwritten` to the frames queued or playing
            self._unwritten.append((self.queue.drained_at(), frame.timestamp_ms))
        return None


def encode_uplink(pcm16k: bytes, frame_ms: int, encoder: OpusEncoder | None = None) -> list[bytes]:
    """Encode 16 kHz mono int16 PCM into Opus packets of `frame_ms`, padding the last frame.

    The microphone always delivers whole frames, so a short tail is padded with silence.
    Pass `encoder` to keep the codec state across calls, as one mic stream does.
    """
    if len(pcm16k) % 2:
        raise ValueError(f"PCM must be whole int16 samples, got {len(pcm16k)} bytes")
    if encoder is None:
        encoder = OpusEncoder(sample_rate=UPLINK_SAMPLE_RATE, channels=1, frame_duration_ms=frame_ms)
    splitter = FrameSplitter(encoder.frame_bytes)
    frames = splitter.push(pcm16k)
    tail = splitter.flush()
    if tail is not None:
        frames.append(tail)
    return [encoder.encode(frame) for frame in frames]


def read_wav_16k_mono(path: str | Path) -> bytes:
    """Read a PCM WAV file (8/16/32-bit, any rate, mono or multi-channel) as 16 kHz mono int16."""
    with wave.open(str(path), "rb") as wav:
        channels = wav.getnchannels()
        width = wav.getsampwidth()
        rate = wav.getframerate()
        raw = wav.readframes(wav.getnframes())
    if width == 1:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.int32) - 128) << 8
    elif width == 2:
        samples = np.frombuffer(raw, dtype="<i2").astype(np.int32)
    elif width == 4:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.int64) >> 16
    else:
        raise ValueError(f"{path}: {8 * width}-bit WAV is not supported; use 8, 16 or 32-bit PCM")
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    pcm = np.clip(samples, -32768, 32767).astype("<i2").tobytes()
    return resample(pcm, rate, UPLINK_SAMPLE_RATE)


def write_wav(path: str | Path, pcm: bytes, sample_rate: int) -> None:
    """Write mono int16 PCM as a WAV file."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)


def tone(
    seconds: float, *, frequency: float = 440.0, sample_rate: int = UPLINK_SAMPLE_RATE, level: float = 0.3
) -> bytes:
    """A sine tone as mono int16 PCM; handy as stand-in speech in tests."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (np.sin(2 * np.pi * frequency * t) * level * 32767).astype("<i2").tobytes()


def silence(seconds: float, *, sample_rate: int = UPLINK_SAMPLE_RATE) -> bytes:
    """Digital silence as mono int16 PCM."""
    return bytes(2 * int(seconds * sample_rate))
