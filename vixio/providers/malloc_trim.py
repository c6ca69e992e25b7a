"""Give the C heap's free pages back to the system after a burst of large native allocations.

glibc keeps freed memory in its arenas for reuse, and, after a large block is freed, raises the
size from which blocks get their own mapping (up to 32 MB), so the next large blocks come from
the heap and stay resident once freed. A local TTS voice allocates tens of MB per sentence (its
tensors grow with the sentence's length): a worker's heap kept 190-270 MB of free pages after a
few long sentences. `malloc_trim(0)` returns the free pages (~40-100 ms under load; it walks
the heap and holds each arena's lock meanwhile), so it runs on the inference pool, at most once
per `MIN_INTERVAL` (a request within it waits for its end). A fixed mapping threshold (`MALLOC_MMAP_THRESHOLD_`) would hold memory
down as well, but costs every large allocation page faults: +15-30 % CPU for Whisper.
No-op where the C library has no `malloc_trim` (not glibc).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

from vixio.providers.inference import inference_executor

MIN_INTERVAL = 2.0
"""Seconds between two trims: a reply's sentences end a few seconds apart."""

_lock = threading.Lock()
_last = float("-inf")
_pending = False
trims = 0
"""Trims run in this process so far."""


def _load_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


_malloc_trim = _load_trim()


def trim_soon() -> None:
    """Trim on the inference pool now, or MIN_INTERVAL after the last trim; one trim waits at most."""
    global _pending
    if _malloc_trim is None:
        return
    with _lock:
        if _pending:
            return
        _pending = True
        delay = _last + MIN_INTERVAL - time.monotonic()
    if delay <= 0:
        _submit()
        return
    timer = threading.Timer(delay, _submit)
    timer.daemon = True
    timer.start()


def _submit() -> None:
    global _pending
    try:
        inference_executor().submit(_trim)
    except RuntimeError:  # the pool is shutting down (the server stops): nothing left to trim for
        with _lock:
            _pending = False


def _trim() -> None:
    global _last, _pending, trims
    try:
        assert _malloc_trim is not None
        _malloc_trim(0)
    finally:
        with _lock:
            _last, _pending = time.monotonic(), False
            trims += 1
