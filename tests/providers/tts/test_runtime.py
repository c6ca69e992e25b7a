"""The shared machinery of local TTS engines: load-once cache, stepwise streaming, sentence split."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future

import pytest

from vixio.providers.tts import _runtime
from vixio.providers.tts._runtime import (
    load_count,
    load_shared,
    split_sentences,
    stream_blocking,
)

pytestmark = pytest.mark.unit


async def test_concurrent_first_loads_share_one_load() -> None:
    key = ("test", object())
    calls: list[int] = []

    def loader() -> object:
        calls.append(threading.get_ident())
        time.sleep(0.1)
        return object()

    results = await asyncio.gather(*(load_shared(key, loader) for _ in range(10)))
    assert len(calls) == 1
    assert len({id(result) for result in results}) == 1
    assert await load_shared(key, loader) is results[0]
    assert load_count(key) == 1
    assert calls[0] != threading.get_ident()  # loaded off the event loop


async def test_a_failed_load_is_forgotten_and_retried() -> None:
    key = ("test", object())

    def broken() -> object:
        raise OSError("model file truncated")

    with pytest.raises(OSError, match="truncated"):
        await load_shared(key, broken)
    assert await load_shared(key, lambda: "voice") == "voice"
    assert load_count(key) == 2


class _InlineExecutor(Executor):
    """Runs each task at once in the caller: its future is done before `submit` returns."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        future: Future[object] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the future carries it
            future.set_exception(exc)
        return future


def test_a_load_that_fails_at_once_does_not_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    # A missing extra makes the loader fail before `load_shared` registers its done callback;
    # the callback then runs in the caller, which must not hold the cache lock at that moment.
    monkeypatch.setattr(_runtime, "tts_executor", _InlineExecutor)
    key = ("test", object())
    outcome: list[BaseException] = []

    def missing_extra() -> object:
        raise ImportError("no module named 'espeakng_loader'")

    def run() -> None:
        try:
            asyncio.run(load_shared(key, missing_extra))
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)  # daemon: a deadlock must not hang pytest
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "load_shared deadlocked on a load that failed at once"
    assert len(outcome) == 1 and isinstance(outcome[0], ImportError)
    assert key not in _runtime._loads  # forgotten, so a later call retries


async def test_cancelling_one_waiter_does_not_cancel_the_load_for_others() -> None:
    key = ("test", object())
    gate = threading.Event()

    def slow() -> str:
        gate.wait(5)
        return "voice"

    impatient = asyncio.create_task(load_shared(key, slow))
    patient = asyncio.create_task(load_shared(key, slow))
    await asyncio.sleep(0.05)
    impatient.cancel()
    gate.set()
    assert await asyncio.wait_for(patient, 5) == "voice"
    assert impatient.cancelled()


async def test_closing_a_stream_stops_stepping_and_closes_the_iterator_after_the_running_step() -> None:
    gate, running, closed = threading.Event(), threading.Event(), threading.Event()
    produced: list[int] = []

    def sentences() -> Iterator[bytes]:
        try:
            for index in range(100):
                if index == 1:
                    running.set()
                    gate.wait(5)  # the prefetched step is still running when the consumer leaves
                produced.append(index)
                yield bytes([index, 0])
        finally:
            closed.set()

    cancel = threading.Event()
    engine = sentences()  # held here, so only an explicit close (not GC) can run its finally
    stream = stream_blocking(engine, cancel)
    assert await anext(stream) == b"\x00\x00"
    assert await asyncio.to_thread(running.wait, 2)
    started = time.perf_counter()
    await stream.aclose()
    assert time.perf_counter() - started < 0.5  # the running step holds its gate for 5 s
    assert cancel.is_set()
    assert not closed.is_set()  # a running step cannot be interrupted...
    gate.set()
    await asyncio.to_thread(closed.wait, 2)  # ...but the iterator is closed right after it
    assert closed.is_set()
    assert produced == [0, 1]


async def test_an_error_in_the_engine_reaches_the_consumer() -> None:
    def failing() -> Iterator[bytes]:
        yield b"\x01\x00"
        raise RuntimeError("onnx session died")

    stream = stream_blocking(failing())
    assert await anext(stream) == b"\x01\x00"
    with pytest.raises(RuntimeError, match="onnx session died"):
        await anext(stream)


def test_sentences_split_at_latin_and_cjk_ends_but_not_inside_numbers() -> None:
    assert split_sentences("Hi there. It is 3.5 degrees! Really?  好的。再见！") == [
        "Hi there.",
        "It is 3.5 degrees!",
        "Really?",
        "好的。",
        "再见！",
    ]
    assert split_sentences(" \n ") == []
