"""Audio codec for the Xiaozhi link: Opus packets, resampling and frame slicing.

All PCM here is signed 16-bit little-endian, interleaved when there is more than one
channel. The device sends Opus at 16 kHz and plays Opus at the rate the server hello
announces (24 kHz by default), one 60 ms packet per WebSocket message.

`opuslib_next` (which bundles libopus) and `soxr` come with the `xiaozhi` extra and are
imported when a codec object is first built, so importing this module never needs them.

Sessions on the event loop encode with `encode_async`: the work runs on one codec thread per
process, batched with every other session's frames (libopus is called through ctypes, which
releases the GIL), and one session's frames stay in order because the session awaits each one.
Uplink packets are decoded on the loop with `decode`: a 60 ms packet takes ~45 us, no more than
handing it to a thread and back costs the loop, and the thread hop would add ~80 us of CPU
per packet on top (measured with 50 listening devices: 12 % less server CPU decoding inline).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from vixio.core.audio import Resampler as Resampler  # re-exported: the codec API keeps its names
from vixio.core.audio import check_aligned as _check_aligned
from vixio.core.audio import resample as resample
from vixio.core.batching import BatchWorker
from vixio.core.chunk import AudioChunk

UPLINK_SAMPLE_RATE = 16000
"""The device always encodes its microphone at 16 kHz mono."""
DOWNLINK_SAMPLE_RATE = 24000
"""What the server announces and encodes; most boards play 24 kHz without resampling."""
FRAME_DURATION_MS = 60
"""Duration of one Opus packet in both directions."""

_OPUS_SAMPLE_RATES = (8000, 12000, 16000, 24000, 48000)
_OPUS_FRAME_DURATIONS_MS = (10, 20, 40, 60, 80, 100, 120)
# The longest packet Opus can describe; a smaller buffer fails on long packets.
_MAX_PACKET_DURATION_MS = 120
_SAMPLE_WIDTH = 2
_MAX_PACKET_BYTES = 4000
"""Room for one encoded packet (libopus' recommended maximum)."""
_EXTRA_HINT = "vixio[xiaozhi] extra: pip install -e '.[xiaozhi]' in the vixio checkout"


class CodecError(Exception):
    """libopus refused a packet or a frame; the message carries libopus's reason."""


@functools.cache
def _opuslib() -> ModuleType:
    try:
        import opuslib_next
    except (ImportError, OSError, RuntimeError) as exc:
        # The bundled wheel raises RuntimeError/OSError when its libopus cannot be loaded.
        raise ImportError(f"Opus support needs opuslib-next-bundled ({exc}); {_EXTRA_HINT}") from exc
    module: ModuleType = opuslib_next
    return module


def _run_calls(jobs: Sequence[tuple[Callable[[Any], Any], Any]]) -> list[Any]:
    """The codec thread's batch: each job is (function, argument); a failure fails that job only."""
    results: list[Any] = []
    for function, argument in jobs:
        try:
            results.append(function(argument))
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting session
            results.append(exc)
    return results


_CODEC_WORKER: BatchWorker[tuple[Callable[[Any], Any], Any], Any] = BatchWorker(_run_calls, name="opus")
"""One thread per process for every session's Opus work."""


def codec_worker() -> BatchWorker[tuple[Callable[[Any], Any], Any], Any]:
    return _CODEC_WORKER


# Frame duration in ms by the TOC byte's configuration number (RFC 6716 §3.1): SILK-only
# 0-11, hybrid 12-15, CELT-only 16-31.
_TOC_FRAME_MS = (10, 20, 40, 60) * 3 + (10, 20) * 2 + (2.5, 5, 10, 20) * 4


def packet_duration(packet: bytes) -> float:
    """Seconds of audio an Opus packet carries, read from its header without decoding (RFC 6716
    §3.1); 0 for an empty (DTX) packet. A malformed packet claims one frame to 120 ms, and the
    decoder refuses it later."""
    if not packet:
        return 0.0
    toc = packet[0]
    code = toc & 0x3
    if code == 0:
        frames = 1
    elif code < 3:
        frames = 2
    else:  # the count is in the next byte; a missing or zero count (invalid) counts as one frame
        frames = max(1, packet[1] & 0x3F) if len(packet) > 1 else 1
    return min(frames * _TOC_FRAME_MS[toc >> 3], _MAX_PACKET_DURATION_MS) / 1000


def _check_opus_format(sample_rate: int, channels: int) -> None:
    if sample_rate not in _OPUS_SAMPLE_RATES:
        raise ValueError(f"Opus sample_rate must be one of {_OPUS_SAMPLE_RATES}, got {sample_rate}")
    if channels not in (1, 2):
        raise ValueError(f"Opus channels must be 1 or 2, got {channels}")


class OpusDecoder:
    """Decodes one Opus packet at a time into PCM at a fixed output rate."""

    def __init__(self, sample_rate: int = UPLINK_SAMPLE_RATE, channels: int = 1) -> None:
        """Create a decoder that outputs `sample_rate` Hz, `channels` channels."""
        _check_opus_format(sample_rate, channels)
        opuslib = _opuslib()
        self.sample_rate = sample_rate
        self.channels = channels
        self._max_frame_samples = sample_rate * _MAX_PACKET_DURATION_MS // 1000
        self._decoder = opuslib.Decoder(sample_rate, channels)
        self._opus_error: type[Exception] = opuslib.OpusError
        # libopus straight into one reused buffer: the wrapper's decode builds a Python list of
        # every sample (~40 us with the GIL held per 60 ms packet).
        self._opus_decode = opuslib.api.decoder.libopus_decode
        self._pcm = (ctypes.c_int16 * (self._max_frame_samples * channels))()
        self._pcm_pointer = ctypes.cast(self._pcm, opuslib.api.c_int16_pointer)

    def decode(self, packet: bytes) -> bytes:
        """Return the PCM of `packet`, whatever its duration (2.5 to 120 ms).

        An empty packet yields b"": with DTX the device may send empty binary frames
        during silence, and they carry no audio. Raises CodecError for a malformed packet.
        """
        if not packet:
            return b""
        data = bytes(packet)
        samples = self._opus_decode(
            self._decoder.decoder_state, data, len(data), self._pcm_pointer, self._max_frame_samples, 0
        )
        if samples < 0:
            raise CodecError(f"cannot decode {len(packet)}-byte Opus packet: {self._opus_error(samples)}")
        return ctypes.string_at(self._pcm, samples * self.channels * _SAMPLE_WIDTH)


class OpusEncoder:
    """Encodes fixed-size PCM frames into Opus packets for the device to play."""

    def __init__(
        self,
        sample_rate: int = DOWNLINK_SAMPLE_RATE,
        channels: int = 1,
        frame_duration_ms: int = FRAME_DURATION_MS,
        bitrate: int | None = None,
        complexity: int = 5,
    ) -> None:
        """Create an encoder for `frame_duration_ms` frames; `bitrate` None lets libopus choose.

        `complexity` (0-10) trades CPU for quality; libopus' default 10 costs about 0.3-1.4 ms
        per 24 kHz frame, 5 about 0.2 ms with no audible loss for speech.

        The device decodes into a buffer sized for the announced frame duration, so
        `frame_duration_ms` must match what the server hello announced.
        """
        _check_opus_format(sample_rate, channels)
        if frame_duration_ms not in _OPUS_FRAME_DURATIONS_MS:
            raise ValueError(
                f"Opus frame_duration_ms must be one of {_OPUS_FRAME_DURATIONS_MS}, got {frame_duration_ms}"
            )
        if not 0 <= complexity <= 10:
            raise ValueError(f"Opus complexity must be 0..10, got {complexity}")
        if bitrate is not None and not 500 <= bitrate <= 512_000:
            raise ValueError(f"Opus bitrate must be 500..512000 bit/s or None, got {bitrate}")
        opuslib = _opuslib()
        self.sample_rate = sample_rate
        self.channels = channels
        self.frame_duration_ms = frame_duration_ms
        self.frame_samples: int = sample_rate * frame_duration_ms // 1000
        """Samples per channel in one frame."""
        self.frame_bytes: int = self.frame_samples * channels * _SAMPLE_WIDTH
        """Bytes of int16 PCM in one frame; the exact input size of `encode`."""
        self._opus_error: type[Exception] = opuslib.OpusError
        self._silence_pcm = bytes(self.frame_bytes)
        self._silence_packet: bytes | None = None
        self._opus_encode = opuslib.api.encoder.libopus_encode
        self._int16_pointer = opuslib.api.c_int16_pointer
        self._packet = (ctypes.c_char * _MAX_PACKET_BYTES)()
        try:
            self._encoder = opuslib.Encoder(sample_rate, channels, opuslib.APPLICATION_AUDIO)
            self._encoder.complexity = complexity
            if bitrate is not None:
                self._encoder.bitrate = bitrate
        except self._opus_error as exc:
            raise CodecError(f"cannot create Opus encoder: {exc}") from exc

    def encode(self, pcm: bytes) -> bytes:
        """Encode one frame of PCM into one Opus packet.

        Input shorter than `frame_bytes` is padded with silence (the tail of an
        utterance); longer input raises ValueError because it would not fit one packet.
        """
        _check_aligned(pcm, self.channels, "OpusEncoder.encode")
        if len(pcm) > self.frame_bytes:
            raise ValueError(
                f"OpusEncoder.encode takes at most one frame ({self.frame_bytes} bytes), got {len(pcm)}; "
                "split the audio with FrameSplitter"
            )
        # libopus reads exactly frame_bytes from the buffer, so it must be full size.
        frame = bytes(pcm).ljust(self.frame_bytes, b"\x00")
        if frame == self._silence_pcm:
            # Digital silence costs libopus ~4x a speech frame; its packet never changes.
            if self._silence_packet is None:
                self._silence_packet = self._encode(frame)
            return self._silence_packet
        return self._encode(frame)

    async def encode_async(self, pcm: bytes) -> bytes:
        """`encode` on the codec thread; await each call before the next (frames are ordered)."""
        return await _CODEC_WORKER.submit((self.encode, pcm))  # type: ignore[no-any-return]

    def _encode(self, frame: bytes) -> bytes:
        size = self._opus_encode(
            self._encoder.encoder_state,
            ctypes.cast(frame, self._int16_pointer),  # type: ignore[arg-type]  # typeshed: bytes is accepted at run time (as c_char_p)
            self.frame_samples,
            self._packet,
            _MAX_PACKET_BYTES,
        )
        if size < 0:
            raise CodecError(f"cannot encode Opus frame: {self._opus_error(size)}")
        return ctypes.string_at(self._packet, size)


class FrameSplitter:
    """Cuts a byte stream of PCM into frames of exactly `frame_bytes`."""

    def __init__(self, frame_bytes: int) -> None:
        """Create a splitter emitting frames of `frame_bytes` bytes."""
        if frame_bytes <= 0:
            raise ValueError(f"frame_bytes must be positive, got {frame_bytes}")
        self.frame_bytes = frame_bytes
        self._buffer = bytearray()

    def push(self, pcm: bytes) -> list[bytes]:
        """Add `pcm` and return every frame now complete, oldest first (possibly none)."""
        self._buffer += pcm
        size = self.frame_bytes
        count = len(self._buffer) // size
        if not count:
            return []
        frames = [bytes(self._buffer[i * size : (i + 1) * size]) for i in range(count)]
        del self._buffer[: count * size]
        return frames

    def flush(self) -> bytes | None:
        """Return the buffered remainder padded with zeros to a full frame, or None if empty."""
        if not self._buffer:
            return None
        frame = bytes(self._buffer).ljust(self.frame_bytes, b"\x00")
        self._buffer.clear()
        return frame

    def clear(self) -> None:
        """Drop buffered audio, e.g. when playback is interrupted."""
        self._buffer.clear()


class ReplyFramer:
    """Reply audio of any sample rate and channel count as mono `out_rate` frames of
    `frame_bytes` (what the downlink encoder takes). A change of rate, or `flush`, ends the
    resampler's stream and pads the last partial frame with silence."""

    def __init__(self, frame_bytes: int, out_rate: int = DOWNLINK_SAMPLE_RATE) -> None:
        self._frames = FrameSplitter(frame_bytes)
        self._out_rate = out_rate
        self._resampler: Resampler | None = None

    def push(self, chunk: AudioChunk) -> list[bytes]:
        """The frames `chunk` completes, oldest first."""
        frames: list[bytes] = []
        if self._resampler is None or self._resampler.in_rate != chunk.sample_rate:
            frames = self.flush()
            self._resampler = Resampler(chunk.sample_rate, self._out_rate)
        pcm = chunk.pcm if chunk.channels == 1 else _downmix(chunk)
        return frames + self._frames.push(self._resampler.process(pcm))

    def flush(self) -> list[bytes]:
        """The rest of the audio pushed so far, the last frame padded."""
        frames: list[bytes] = []
        if self._resampler is not None:
            frames = self._frames.push(self._resampler.process(b"", last=True))
            self._resampler = None
        tail = self._frames.flush()
        return frames if tail is None else [*frames, tail]

    def clear(self) -> None:
        """Drop what is buffered (an interrupted reply)."""
        self._resampler = None
        self._frames.clear()


def _downmix(chunk: AudioChunk) -> bytes:
    samples = chunk.samples.reshape(-1, chunk.channels).mean(axis=1)
    pcm: bytes = samples.astype("<i2").tobytes()  # numpy's mean reaches mypy as Any
    return pcm
