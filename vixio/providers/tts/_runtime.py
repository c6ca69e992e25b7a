"""Shared machinery for local TTS engines: one thread pool, load-once voices, stepwise streaming.

Local engines block (ONNX inference, libespeak-ng) and release the GIL while they compute.
They run on one process-wide, bounded pool, never on the event loop and never on a thread
per connection: on a 2-core box more threads only thrash the cores. Streams advance one
chunk (one sentence) per pool task, so sessions interleave sentence by sentence instead of
one long reply holding a worker for seconds.

The pool size is `VIXIO_TTS_WORKERS` if set, otherwise min(2, CPU count).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from loguru import logger

from vixio.providers.inference import inference_executor

T = TypeVar("T")


_loads: dict[Hashable, Future[Any]] = {}
_load_counts: dict[Hashable, int] = {}
_loads_lock = threading.Lock()

_DONE = object()
# A sentence ends at . ! ? ; or their CJK forms, followed by space or the end; CJK marks end
# a sentence even without a following space because Chinese text has none.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])\s*")


def tts_executor() -> ThreadPoolExecutor:
    """The process-wide inference pool, shared with the ASR (one small pool for all models)."""
    return inference_executor()


async def load_shared(key: Hashable, loader: Callable[[], T]) -> T:
    """Return the object `loader()` built for `key`, building it at most once per process.

    Concurrent first callers (from any thread or event loop) wait on the same load. A failed
    load is forgotten so a later call can retry. Cancelling one waiter never cancels the
    load the others wait on.
    """
    started = False
    with _loads_lock:
        future = _loads.get(key)
        if future is None:
            future = tts_executor().submit(loader)
            _loads[key] = future
            _load_counts[key] = _load_counts.get(key, 0) + 1
            started = True
    if started:
        # Outside the lock: a load that already failed (a missing extra fails at once) runs
        # the callback right here, and the callback takes the lock.
        future.add_done_callback(lambda done: _forget_failed(key, done))
    return await asyncio.shield(asyncio.wrap_future(future))


def load_count(key: Hashable) -> int:
    """How many times a load was started for `key` in this process (1 when caching works)."""
    with _loads_lock:
        return _load_counts.get(key, 0)


def _forget_failed(key: Hashable, future: Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        with _loads_lock:
            if _loads.get(key) is future:
                del _loads[key]


def _next_or_done(chunks: Iterator[T]) -> T | object:
    return next(chunks, _DONE)


async def stream_blocking(chunks: Iterator[bytes], cancel: threading.Event | None = None) -> AsyncIterator[bytes]:
    """Drive a blocking iterator on the TTS pool, one `next()` per task, and yield its items.

    The next item is computed while the consumer handles the current one (one step of
    prefetch). Closing this generator sets `cancel` (for engines that can abort mid-step)
    and cancels a step not yet started; a step already running is not interrupted by
    Python, so the iterator is closed as soon as that step returns. Either way no further
    step runs.
    """
    executor = tts_executor()
    step: Future[Any] = executor.submit(_next_or_done, chunks)
    try:
        while True:
            item = await asyncio.wrap_future(step)
            if item is _DONE:
                return
            step = executor.submit(_next_or_done, chunks)
            yield item
    finally:
        if cancel is not None:
            cancel.set()
        if step.cancel() or step.done():
            _close_quietly(chunks)
        else:
            step.add_done_callback(lambda _: _close_quietly(chunks))


def _close_quietly(chunks: Iterator[bytes]) -> None:
    close = getattr(chunks, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception as exc:  # noqa: BLE001 - a close failure must not mask the consumer's exit
        logger.warning("closing a TTS stream failed: {}", exc)


def split_sentences(text: str) -> list[str]:
    """Split `text` at sentence ends (Latin and CJK punctuation); drop empty parts."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]
