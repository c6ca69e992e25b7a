"""One process-wide, bounded thread pool for blocking model inference.

Local models (Whisper, TTS, ...) block for tens to hundreds of milliseconds and release the
GIL while they compute. They must not run on the event loop, and they must not get a thread
per connection either: on a 2-core box, ten sessions transcribing at once in ten threads
only thrash the cores and raise everyone's latency. All blocking inference therefore goes
through this one small pool; calls beyond its size wait their turn in its queue.

The size is `VIXIO_INFERENCE_WORKERS` if set, otherwise min(2, CPU count).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from loguru import logger

T = TypeVar("T")

_ENV_WORKERS = "VIXIO_INFERENCE_WORKERS"
_EXECUTOR: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def inference_workers() -> int:
    """Threads in the inference pool: `VIXIO_INFERENCE_WORKERS`, else min(2, CPU count)."""
    raw = os.environ.get(_ENV_WORKERS)
    if raw is None:
        return max(1, min(2, os.cpu_count() or 1))
    try:
        workers = int(raw)
    except ValueError:
        workers = 0
    if workers < 1:
        raise ValueError(f"{_ENV_WORKERS} must be a positive integer, got {raw!r}")
    return workers


def inference_executor() -> ThreadPoolExecutor:
    """Return the process-wide inference pool, creating it on first use."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            workers = inference_workers()
            _EXECUTOR = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vixio-inference")
            logger.debug("inference pool started with {} worker(s)", workers)
        return _EXECUTOR


async def run_inference(func: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """Run `func(*args, **kwargs)` on the inference pool and await its result.

    Cancelling the awaiting task does not stop a call that already started (threads cannot be
    interrupted); its result is discarded when it finishes.
    """
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(inference_executor(), functools.partial(func, *args, **kwargs))


def shutdown_inference_executor(wait: bool = True) -> None:
    """Stop the pool (at server shutdown); the next `run_inference` starts a new one."""
    global _EXECUTOR
    with _LOCK:
        executor, _EXECUTOR = _EXECUTOR, None
    if executor is not None:
        executor.shutdown(wait=wait, cancel_futures=True)
