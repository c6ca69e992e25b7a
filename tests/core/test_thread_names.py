"""vixio's threads carry their names at the OS level (top -H, /proc, the capacity benchmark's CPU by thread)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from vixio.core.batching import BatchWorker
from vixio.core.thread_names import name_this_thread

pytestmark = [pytest.mark.process, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]


def _comm(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


def test_a_thread_named_is_named_in_proc_cut_to_15_bytes() -> None:
    seen: list[str] = []

    def run() -> None:
        name_this_thread("vixio-a-rather-long-name")
        seen.append(_comm(threading.get_native_id()))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == ["vixio-a-rather-"]


async def test_a_batch_workers_thread_is_named_after_it() -> None:
    worker: BatchWorker[int, str] = BatchWorker(
        lambda jobs: [_comm(threading.get_native_id()) for _ in jobs], name="opus-test"
    )
    try:
        assert await worker.submit(1) == "vixio-opus-test"
    finally:
        worker.close()
