"""The Redis store's link to its server: connecting, batching calls into pipelines, and outages.

    link = RedisLink(url, password=None, timeout=1.0)
    await link.connect()                                   # StoreError naming state.url if it cannot
    value = await link.call(lambda pipe: pipe.hget("k", "f"), write=False)

Calls made during one turn of the event loop go out together as one pipeline: one round trip,
one socket write and one read for all of them. redis-py spends ~200 us of the loop's CPU on a
command sent alone and ~25 us per command in a pipeline of 100 (measured here), so 100 devices
finishing a turn at once cost the loop a few milliseconds, not twenty. At most `MAX_PIPELINES`
pipelines are under way; calls queued meanwhile go in the next.

Outages: a pipeline that cannot reach the server fails within `timeout` (its reads raise
`StoreError`, its writes `StoreWriteError`); the first failure logs one ERROR, then calls fail at
once without touching the network until a retry is due (backoff from 0.25 s doubling to 8 s), and
the first pipeline that works logs one INFO line. A server that restarted is reconnected on the
next call (one immediate retry), and scripts it forgot are loaded again.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from loguru import logger

from vixio.state.store import StoreError, StoreWriteError

Op = Callable[[Any], Any]
"""Queues one command on the pipeline it is given."""

MAX_PIPELINES = 4
"""Pipelines under way at once (each on its own connection)."""
MAX_BATCH = 512
"""Calls in one pipeline at most."""
BACKOFF_FIRST, BACKOFF_MAX = 0.25, 8.0
"""Seconds between attempts while the server is unreachable: doubling from the first to the max."""


class RedisLink:
    """One process's connections to one Redis server (see the module docstring)."""

    def __init__(self, url: str, *, password: str | None, timeout: float, location: str) -> None:
        self.url = url
        self.location = location
        """The URL without its password, for messages."""
        self.client: Any = None
        """The redis.asyncio client, once connected (for what must not be batched: the first commands)."""
        self.round_trips = 0
        """Pipelines sent to the server (each one round trip): what bench/bench_state.py counts."""
        self._password = password
        self._timeout = timeout
        self._queue: list[tuple[Op, asyncio.Future[Any], bool]] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self._scripts: dict[str, str] = {}
        """SHA1 -> source of every script called, to load again after a server restart."""
        self._failing = False
        """An outage began and no call has worked since (its ERROR is logged once)."""
        self._refusing = False
        """The server refused a write and none has worked since (its ERROR is logged once)."""
        self._retry_at = 0.0
        self._backoff = BACKOFF_FIRST

    async def connect(self) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        where = f"state.url {self.location}"
        try:
            # One retry, at once: after a server restart the pooled connection is dead and the
            # retry reconnects; a server still down fails the call within the timeout.
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=MAX_PIPELINES + 1,
                timeout=self._timeout,
                socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
                retry=Retry(NoBackoff(), 1),
                decode_responses=True,
                client_name="vixio",
                **({"password": self._password} if self._password is not None else {}),
            )
        except ValueError as exc:
            raise StoreError(
                f"{where}: not a Redis URL ({exc}); expected redis://host:port/db or rediss://host:port/db"
            ) from None
        client = aioredis.Redis.from_pool(pool)
        try:
            await client.ping()
        except RedisError as exc:
            await client.aclose()
            raise StoreError(unusable(where, exc)) from None
        self.client = client

    async def close(self) -> None:
        """Send what is queued, then close the connections."""
        while self._flushers:
            await asyncio.wait(set(self._flushers))
        client, self.client = self.client, None
        if client is not None:
            await client.aclose()

    def script(self, source: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Op:
        """An `Op` that runs the Lua `source` (by its SHA1; loaded when the server lacks it)."""
        sha = hashlib.sha1(source.encode()).hexdigest()
        self._scripts.setdefault(sha, source)
        return lambda pipe: pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)

    async def call(self, op: Op, *, write: bool) -> Any:
        """Run `op` in the next pipeline and return its reply (StoreError / StoreWriteError if it fails)."""
        if self.client is None:
            raise StoreError(f"state store {self.location} is not open")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((op, future, write))
        # A flusher that has finished stays in the set until its done-callback runs: count only
        # those still running (each checks the queue again before it ends), or this call may wait forever.
        if sum(not flusher.done() for flusher in self._flushers) < MAX_PIPELINES:
            task = asyncio.create_task(self._flush(), name="vixio-redis-pipeline")
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # the calls of this turn of the loop join the batch
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                await self._send(batch)
            except BaseException as exc:  # no caller may wait forever for a batch that went wrong
                for _, future, write in batch:
                    _settle(
                        future,
                        error=(StoreWriteError if write else StoreError)(f"state store {self.location}: {exc!r}"),
                    )
                if not isinstance(exc, Exception):
                    raise
                logger.opt(exception=exc).error("state store {}: a pipeline failed", self.location)

    async def _send(self, batch: list[tuple[Op, asyncio.Future[Any], bool]], reloaded: bool = False) -> None:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import NoScriptError, RedisError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        if self._failing and time.monotonic() < self._retry_at:  # down: fail at once until a retry is due
            for _, future, write in batch:
                _settle(
                    future,
                    error=(StoreWriteError if write else StoreError)(
                        f"state store {self.location}: unreachable (retrying with backoff)"
                    ),
                )
            return
        pipe = self.client.pipeline(transaction=False)
        queued = []
        for call in batch:
            try:
                call[0](pipe)
            except Exception as exc:  # noqa: BLE001 - a bad argument fails its own call, not the batch
                _settle(call[1], error=exc)
            else:
                queued.append(call)
        if not queued:
            return
        self.round_trips += 1
        try:
            replies = await pipe.execute(raise_on_error=False)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            self._outage(exc)
            message = unusable(f"state store {self.location}", exc)
            for _, future, write in queued:
                _settle(future, error=(StoreWriteError if write else StoreError)(message))
            return
        except RedisError as exc:  # the whole pipeline was refused (e.g. NOAUTH after a restart with a password)
            replies = [exc] * len(queued)
        except BaseException as exc:  # cancelled, or a bug: nobody waits forever
            for _, future, _ in queued:
                _settle(
                    future,
                    error=exc
                    if isinstance(exc, Exception)
                    else StoreError(f"state store {self.location}: call cancelled"),
                )
            raise
        forgotten = [call for call, reply in zip(queued, replies, strict=True) if isinstance(reply, NoScriptError)]
        if forgotten and not reloaded:  # the server restarted and forgot its scripts
            await self._load_scripts()
            await self._send(forgotten, reloaded=True)
        wrote = False
        for (_, future, write), reply in zip(queued, replies, strict=True):
            if isinstance(reply, NoScriptError) and not reloaded:
                continue
            if isinstance(reply, RedisError):
                _settle(future, error=self._refused(reply, write))
            else:
                wrote = wrote or write
                _settle(future, result=reply)
        answered = not all(isinstance(reply, RedisError) for reply in replies)
        if self._failing and answered:
            self._failing, self._backoff = False, BACKOFF_FIRST
            logger.info("state store {}: works again", self.location)
        if self._refusing and wrote:
            self._refusing = False
            logger.info("state store {}: writes work again", self.location)

    async def _load_scripts(self) -> None:
        from redis.exceptions import RedisError

        try:
            for source in list(self._scripts.values()):  # a call may add a script while this awaits
                await self.client.script_load(source)
        except RedisError:
            pass  # the calls that need them fail as NOSCRIPT: reported below

    def _refused(self, exc: Exception, write: bool) -> StoreError:
        """The server answered no: out of memory (maxmemory), a read-only replica, a script error."""
        message = f"state store {self.location}: Redis refused: {exc}"
        if "maxmemory" in str(exc) or str(exc).startswith("OOM"):
            message = (
                f"state store {self.location}: Redis is out of memory (maxmemory): give it more, or set "
                "maxmemory-policy volatile-lru so that old turns make room"
            )
        if not write:
            return StoreError(message)
        if not self._refusing:
            self._refusing = True
            logger.error(
                "{}; what is not stored now is lost, the conversations go on (one line until writes work again)",
                message,
            )
        return StoreWriteError(message)

    def _outage(self, exc: BaseException) -> None:
        if not self._failing:
            self._failing, self._backoff = True, BACKOFF_FIRST
            logger.error(
                "{}; what is not stored now is lost, the conversations go on, new ones start without "
                "their history; retrying with backoff (one line until it is back)",
                unusable(f"state store {self.location}", exc),
            )
        else:
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
        self._retry_at = time.monotonic() + self._backoff


def _settle(future: asyncio.Future[Any], *, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():  # the caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def unprotected(url: str, password: str | None) -> str | None:
    """The warning for a Redis that takes commands without a password, or None. Anyone who can
    reach such a server reads every conversation and rewrites memories, profiles, pairings and
    admissions (docs/security.md#redis)."""
    if password or urlsplit(url).password:
        return None
    scheme = urlsplit(url).scheme
    where = "a Unix socket: every local user allowed to open it" if scheme == "unix" else "anyone who can reach it"
    return (
        f"state.url {url} has no password: {where} can read every device's conversations and rewrite their "
        "memory, profiles, pairings and admissions; set requirepass on the server and state.password "
        "(e.g. ${REDIS_PASSWORD}), and use rediss:// across machines (docs/security.md#redis)"
    )


def unusable(where: str, exc: BaseException) -> str:
    """What went wrong reaching the server, and what the operator can do about it."""
    text = str(exc) or type(exc).__name__
    refused = re.match(r"Error (\d+) connecting to ", text)  # redis-py's wording of a socket error
    if refused:
        text = os.strerror(int(refused.group(1)))
    lowered = text.lower()
    if "auth" in lowered or "password" in lowered:
        return (
            f"{where}: Redis refused the password ({text}); set state.password (or the password in "
            "state.url) to the server's"
        )
    return f"{where}: cannot reach Redis ({text}); start it, or point state.url to a running Redis or Valkey server"
