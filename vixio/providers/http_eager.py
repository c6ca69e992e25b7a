"""Start aiohttp's request-body writer eagerly on Python 3.11, as aiohttp does on 3.12+.

aiohttp writes a request's body (with the headers it buffered) from a task of its own. On Python
3.12+ it starts that task eagerly, so a small body (an ASR upload, a TTS request) is written before
`post()` goes on; on 3.11 the task waits for the next loop iteration. On a busy server an
iteration is ~10-15 ms (200 devices on 2 cores), and every ASR and TTS request of a turn waits
for one before its server even sees the request.

`install()` gives `aiohttp.client_reqrep` (and only it) an `asyncio` whose `create_task` does what
`eager_start=True` does (`core/eager.py`): the first step runs at once; what is left continues in
a task. Applied only to the aiohttp versions it was checked against, on
Python 3.11 (3.12+ needs nothing).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import sys
import types
from collections.abc import Coroutine
from typing import Any

from loguru import logger

from vixio.core.eager import eager_task

_CHECKED_VERSIONS = ("3.14.",)
_MODULE = "aiohttp.client_reqrep"


def install() -> bool:
    """Patch once; True when aiohttp's body writer starts eagerly (or needs no patch)."""
    if sys.version_info >= (3, 12):
        return True
    try:
        aiohttp = importlib.import_module("aiohttp")
        module = importlib.import_module(_MODULE)
    except ImportError:
        return False
    if not str(getattr(aiohttp, "__version__", "")).startswith(_CHECKED_VERSIONS):
        return False
    if not isinstance(module.asyncio, _EagerAsyncio):
        module.asyncio = _EagerAsyncio()
        logger.debug("aiohttp: request bodies are written without waiting for a loop iteration")
    return True


class _EagerAsyncio(types.ModuleType):
    """`asyncio`, but `create_task` starts the coroutine eagerly."""

    def __init__(self) -> None:
        super().__init__("asyncio")

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    def create_task(coro: Coroutine[Any, Any, Any], *, name: str | None = None,
                    context: contextvars.Context | None = None) -> asyncio.Future[Any]:
        return eager_task(coro, name=name, context=context)
