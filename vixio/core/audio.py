"""PCM helpers shared by stations and transports: streaming resampling (soxr, imported lazily)."""

from __future__ import annotations

import functools
from types import ModuleType

import numpy as np

_SAMPLE_WIDTH = 2
_INT16_LE = np.dtype("<i2")

__all__ = ["Resampler", "check_aligned", "resample"]


@functools.cache
def _soxr() -> ModuleType:
    try:
        import soxr
    except ImportError as exc:
        raise ImportError(
            f"Resampling needs soxr ({exc}); vixio[xiaozhi] extra: pip install -e '.[xiaozhi]' in the vixio checkout"
        ) from exc
    module: ModuleType = soxr
    return module


def check_aligned(pcm: bytes, channels: int, what: str) -> None:
    step = _SAMPLE_WIDTH * channels
    if len(pcm) % step:
        raise ValueError(
            f"{what}: {len(pcm)} bytes is not a whole number of int16 samples "
            f"({step} bytes per sample with {channels} channel(s))"
        )


class Resampler:
    """Streaming int16 resampler that keeps filter state between calls.

    Feed it audio in chunks of any size, then call `process(..., last=True)` once at
    the end of the stream to flush the filter's delayed tail. Chunks need not end on a
    sample boundary: an incomplete trailing sample is held until the next call.
    """

    def __init__(self, in_rate: int, out_rate: int, channels: int = 1) -> None:
        """Create a resampler from `in_rate` Hz to `out_rate` Hz for interleaved `channels`."""
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got in_rate={in_rate}, out_rate={out_rate}")
        if channels < 1:
            raise ValueError(f"channels must be at least 1, got {channels}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.channels = channels
        self._pending = b""
        self._stream = (
            None if in_rate == out_rate else _soxr().ResampleStream(in_rate, out_rate, channels, dtype="int16")
        )

    def process(self, pcm: bytes, last: bool = False) -> bytes:
        """Resample the next chunk; with `last` also flush everything still buffered.

        Output length varies per call because of the filter delay; over a whole stream
        it totals about `input_samples * out_rate / in_rate`. Raises ValueError if the
        stream ends (`last`) in the middle of a sample.
        """
        step = _SAMPLE_WIDTH * self.channels
        data = self._pending + bytes(pcm) if self._pending else bytes(pcm)
        whole = len(data) - len(data) % step
        if last and whole != len(data):
            raise ValueError(
                f"Resampler stream ended mid-sample: {len(data) - whole} stray byte(s) "
                f"({step} bytes per sample with {self.channels} channel(s))"
            )
        self._pending = data[whole:]
        if self._stream is None:
            return data[:whole]
        samples = np.frombuffer(data, dtype=_INT16_LE, count=whole // _SAMPLE_WIDTH).astype(np.int16, copy=False)
        if self.channels > 1:
            samples = samples.reshape(-1, self.channels)
        out = self._stream.resample_chunk(samples, last=last)
        return _to_le_bytes(out)


def resample(pcm: bytes, in_rate: int, out_rate: int) -> bytes:
    """Resample a complete mono int16 clip in one call; returns the input when rates match."""
    check_aligned(pcm, 1, "resample")
    if in_rate <= 0 or out_rate <= 0:
        raise ValueError(f"sample rates must be positive, got in_rate={in_rate}, out_rate={out_rate}")
    if in_rate == out_rate or not pcm:
        return bytes(pcm)
    samples = np.frombuffer(pcm, dtype=_INT16_LE).astype(np.int16, copy=False)
    return _to_le_bytes(_soxr().resample(samples, in_rate, out_rate))


def _to_le_bytes(samples: np.ndarray) -> bytes:
    return samples.astype(_INT16_LE, copy=False).tobytes()
