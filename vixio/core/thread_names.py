"""The OS-level name of a thread, so `top -H`, /proc/<pid>/task/*/comm and profilers tell vixio's
threads apart (Python before 3.14 leaves every thread named after the interpreter: "python"), and
its priority (`lower_this_thread`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import threading

_PR_SET_NAME = 15
_NAME_BYTES = 15
"""Linux keeps 15 bytes of a thread's name (16 with the terminating NUL)."""


@functools.cache
def _prctl() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def name_this_thread(name: str) -> None:
    """Give the calling thread `name` (cut to 15 bytes) at the OS level; nothing where unsupported."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:_NAME_BYTES]), 0, 0, 0)  # type: ignore[operator]


def lower_this_thread(steps: int) -> None:
    """Run the calling thread `steps` nice levels below where it runs now (at most 19): when the
    CPU is busy, the scheduler then gives it a smaller share than the event loop. Linux only,
    where a thread has its own nice value (elsewhere setpriority would lower the whole process);
    nothing when it cannot be done."""
    if steps <= 0 or not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + steps))
    except OSError:
        pass
