"""Open a cloud API's connection before the turn needs it.

A Xiaozhi device connects when its wake word is heard, and the user speaks a second later. By
then every pool of connections to a cloud API is cold: idle connections are closed after seconds
(the agent's after 5, aiohttp's after 15, many servers' sooner). The first transcription, model
call and speech of the conversation would each wait for DNS, TCP and TLS, two to four round trips
apiece, one after the other on the way to the first answer; after a pause of more than a few
seconds the next turn would again.

`Warmth` keeps one pool's bookkeeping: when it was last used, and whether a warm-up is under
way. `warm(send)` sends one small request (a HEAD to the API's URL: any answer, even 405, leaves
an open connection in the pool) only when the pool has had no request for `FRESH_FOR` seconds,
so a busy server (whose pools are always in use) sends none. A warm-up that fails is logged at
DEBUG and forgotten: the turn's own request will report what is wrong.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from loguru import logger

from vixio.core.eager import eager_task

FRESH_FOR = 4.0
"""Seconds after a request (or a warm-up) that a pool counts as warm: under the 5 s after which
the agent's pool and uvicorn-based servers drop an idle connection."""
WARM_TIMEOUT = 10.0
"""Longest a warm-up request may take (it is never waited for by a turn)."""


class Warmth:
    """When one connection pool was last used, and its warm-ups (one at a time)."""

    def __init__(self, what: str, *, fresh_for: float = FRESH_FOR) -> None:
        self.what = what
        """Named in the DEBUG line of a failed warm-up (e.g. the API's URL)."""
        self.fresh_for = fresh_for
        self.warmups = 0
        """Warm-up requests sent."""
        self._used_at = float("-inf")
        self._warming = False

    def used(self) -> None:
        """A request on this pool just ended (its connection went back to the pool)."""
        self._used_at = time.monotonic()

    @property
    def cold(self) -> bool:
        """No request for `fresh_for` seconds and no warm-up under way."""
        return not self._warming and time.monotonic() - self._used_at >= self.fresh_for

    async def warm(self, send: Callable[[], Awaitable[Any]]) -> bool:
        """Await `send()` (the warm-up request) when the pool is cold; True if it was sent."""
        if not self.cold:
            return False
        self._warming = True
        self.warmups += 1
        try:
            await send()
        except Exception as exc:  # noqa: BLE001 - a warm-up only ever saves time; the turn reports failures
            logger.debug("warm-up of {} failed: {}: {}", self.what, type(exc).__name__, exc)
        finally:
            self._warming = False
            self.used()
        return True


async def head(session: Any, url: str, **options: Any) -> None:
    """One HEAD request to `url` on the aiohttp `session` (`options` as `session.head`'s), its
    (empty) body read so the connection goes back to the pool."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=WARM_TIMEOUT)
    async with session.head(url, allow_redirects=False, timeout=timeout, **options) as response:
        await response.read()


class Prewarmer:
    """Warms a voice stack's cloud APIs in the background: each call starts, for each API whose
    pool is cold, one warm-up (`warms`: each API's `warm()`); a warm pool costs a check."""

    def __init__(self, warms: Sequence[Callable[[], Coroutine[Any, Any, Any]]]) -> None:
        self.warms = list(warms)
        self._running: set[asyncio.Future[Any]] = set()

    def __call__(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a pipeline built outside a loop (a script): nothing to warm with
            return
        for warm in self.warms:
            started = eager_task(warm())  # a warm pool's check finishes here, no task made
            if not started.done():
                self._running.add(started)
                started.add_done_callback(self._running.discard)

    async def close(self) -> None:
        """Cancel the warm-ups under way (the server is stopping; their pools close next)."""
        running, self._running = list(self._running), set()
        for warming in running:
            warming.cancel()
        await asyncio.gather(*running, return_exceptions=True)
