"""The AsyncOpenAI clients the agent's `openai/...` models share: one per (server, key, timeout)
per event loop, on `aiohttp_transport`, their pools closed on their loop.

A client's connection pool belongs to the loop it was made on, so each loop has its own clients
(a restarted server, each test). An aiohttp pool must be closed on its loop too, or aiohttp
reports "Unclosed client session". The server closes its loop's pools when it stops
(`close_openai_clients`); a loop run by `asyncio.run` or `asyncio.Runner` (pytest-asyncio's
tests) closes them itself as it shuts down, through an async generator that waits at its `yield`
for that (`loop.shutdown_asyncgens()` closes every open one); a loop closed any other way is
forgotten, silently, the next time a pool is made. A pool a client makes again after a close
(another server still on the loop) is tracked like the first.

The table is keyed weakly by loop, but its pools hold their loop, so an entry is removed by
those three paths, never left to the garbage collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from vixio.providers.agent.openai_agents.aiohttp_transport import AiohttpTransport

ClientKey = tuple[str | None, str | None, float | None]
"""(API base, API key, timeout)."""


class _LoopClients:
    """One loop's clients, the pools they opened on it, and what closes those at its shutdown."""

    def __init__(self) -> None:
        self.clients: dict[ClientKey, tuple[AsyncOpenAI, AiohttpTransport]] = {}
        """Each client with the transport under it (whose pool `warm_openai_client` warms)."""
        self.pools: list[AiohttpTransport] = []
        self.closer: AsyncGenerator[None, None] | None = None

    async def aclose(self) -> None:
        pools, self.pools = self.pools, []
        self.clients.clear()
        for pool in pools:
            with contextlib.suppress(Exception):  # a pool that fails to close is still let go
                await pool.aclose()

    def discard(self) -> None:
        for pool in self.pools:
            pool.discard()
        self.pools, self.clients = [], {}


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClients] = weakref.WeakKeyDictionary()


def shared_openai_client(api_base: str | None, api_key: str | None, timeout: float | None) -> AsyncOpenAI:
    """The running loop's client for this server, key and timeout (made on first use)."""
    return _client(api_base, api_key, timeout)[0]


async def warm_openai_client(api_base: str | None, api_key: str | None, timeout: float | None) -> bool:
    """Open a connection to this server's chat endpoint if the running loop's pool for it went
    cold (see providers/prewarm.py); True if a warm-up request was sent."""
    client, transport = _client(api_base, api_key, timeout)
    return await transport.warm(str(client.base_url).rstrip("/") + "/chat/completions")


async def close_openai_clients() -> None:
    """Close the running loop's pools (the server is stopping); the next use makes new ones."""
    entry = _CLIENTS.pop(asyncio.get_running_loop(), None)
    if entry is not None and entry.closer is not None:
        await entry.closer.aclose()  # runs its `finally`


def _client(api_base: str | None, api_key: str | None, timeout: float | None) -> tuple[AsyncOpenAI, AiohttpTransport]:
    entry = _entry(asyncio.get_running_loop())
    key = (api_base, api_key, timeout)
    made = entry.clients.get(key)
    if made is None:
        made = entry.clients[key] = _new_client(api_base, api_key, timeout)
    return made


def _entry(loop: asyncio.AbstractEventLoop) -> _LoopClients:
    entry = _CLIENTS.get(loop)
    if entry is None:
        for closed in [other for other in _CLIENTS if other.is_closed()]:
            _CLIENTS.pop(closed).discard()
        entry = _CLIENTS[loop] = _LoopClients()
        entry.closer = _close_at_loop_shutdown(loop, entry)
        # Its first step only reaches the `yield` (nothing to wait for), so it is taken here; the
        # loop registers the generator then, to close at shutdown.
        with contextlib.suppress(StopIteration):
            entry.closer.asend(None).send(None)
    return entry


async def _close_at_loop_shutdown(loop: asyncio.AbstractEventLoop, entry: _LoopClients) -> AsyncGenerator[None, None]:
    """Waits at `yield` until `close_openai_clients` or the loop's `shutdown_asyncgens()` closes it."""
    try:
        yield
    finally:
        if _CLIENTS.get(loop) is entry:
            del _CLIENTS[loop]
        await entry.aclose()


def _track(pool: AiohttpTransport) -> None:
    """A pool was opened on the running loop: it is closed with that loop's clients."""
    _entry(asyncio.get_running_loop()).pools.append(pool)


def _new_client(
    api_base: str | None, api_key: str | None, timeout: float | None
) -> tuple[AsyncOpenAI, AiohttpTransport]:
    """An AsyncOpenAI client with the SDK's own defaults (limits, redirects, timeouts when none is
    given) on an aiohttp transport (returned too); no retries (the user hears an apology, not silence)."""
    import httpx2
    from openai import DEFAULT_CONNECTION_LIMITS, DEFAULT_TIMEOUT, AsyncOpenAI

    from vixio.providers.agent.openai_agents.aiohttp_transport import AiohttpTransport

    transport = AiohttpTransport(limits=DEFAULT_CONNECTION_LIMITS, on_open=_track)
    http_client = httpx2.AsyncClient(transport=transport, timeout=DEFAULT_TIMEOUT, follow_redirects=True)
    # No key anywhere: a local server may not need one; a remote one answers 401, which the
    # user hears as "rejected the API key" (as with litellm).
    secret = api_key or os.environ.get("OPENAI_API_KEY") or "no-api-key"
    # `timeout` as before: each request's limits (httpx2 hands them to the transport).
    client = AsyncOpenAI(base_url=api_base, api_key=secret, max_retries=0, timeout=timeout, http_client=http_client)
    return client, transport
