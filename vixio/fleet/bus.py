"""The workers of the other instances of a fleet, reached over Redis pub/sub (`state.backend: redis`).

On one machine the workers call each other's session routes over their private Unix sockets
(peers.py). In a fleet the same calls, `method path {"call": ..., "args": ...}`, travel over Redis
to a worker of another instance, addressed by its holder name (the one in the live-session
directory, "host-2/w0"), and its answer comes back the same way; the receiving worker hands the
call to its own session routes, so a route is written once for both transports.

    worker "a/w0"                       Redis                          worker "b/w0"
    Peers.request("b/w0", ...) ─ PUBLISH vixio:bus:b/w0 {id, reply_to, method, path, json} ─►
                                                                        its session routes answer
    ◄──────────────────────── PUBLISH vixio:bus:a/w0 {re: id, status, body} ──────────────────

Who is in the fleet: every serving worker writes its name and an expiry into the hash
`vixio:bus-members` every `ttl / 3` seconds; a killed one drops out `ttl` seconds after its last
write. A supervisor mostly asks (its console lists every instance's sessions) and is no member; it
answers one call, an activation code confirmed on another instance (fleet_activation.py). Pub/sub keeps nothing: a call to a worker that is not subscribed any
more is answered 502 at once (PUBLISH reached nobody), and the caller decides, as for a
restarting worker on one machine.

Every message, call and answer, is signed with `state.fleet_secret` and names its channel, its
time and a random id (bus_auth.py): whoever can write to Redis without the secret can make no
worker act, and a captured message cannot be published again, later or twice.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.config.memory import FLEET_SECRET_MISSING
from vixio.core.log_throttle import LogThrottle
from vixio.fleet.bus_auth import BusSigner, Refused
from vixio.fleet.peers import PeerReply

if TYPE_CHECKING:
    from vixio.config.models import VixioConfig

log = logger.bind(component="vixio.bus")

CHANNELS = "bus:"
"""After `state.prefix`: each process's channel is `vixio:bus:<its name>`."""
MEMBERS = "bus-members"
"""After `state.prefix`: the hash of serving workers and when each drops out."""
MAX_MESSAGE_BYTES = 1 << 20
"""Larger messages are dropped with a warning (a tool result or a tool list is far smaller)."""
MAX_IN_FLIGHT = 256
"""Calls this process serves at once for other instances; more are answered 503."""
MAX_CONNECTIONS = 6
"""Connections to Redis per process: the subscription's, and the rest shared by calls (a call waits
for a free one rather than opening another)."""
RECONNECT_FIRST, RECONNECT_MAX = 0.5, 10.0
"""Seconds before subscribing again after Redis went away: first, doubling up to the last."""

LEAVE_TIMEOUT = 2.0
"""Seconds a stopping worker tries to take itself off the bus's members (they expire anyway)."""

Serve = Callable[[str, str, Any], Awaitable[PeerReply]]
"""(method, path, JSON body) -> this process's answer (a worker asks its own session routes)."""


class BusNameTaken(RuntimeError):
    """Another process on the same Redis uses this process's name (two instances, one name)."""


def fleet_bus(
    config: VixioConfig, name: str, serve: Serve | None = None, member: bool | None = None
) -> RedisBus | None:
    """This process's bus when the config makes a fleet (`state.backend: redis`), else None."""
    from vixio.fleet.directory import in_fleet

    if not in_fleet(config):
        return None
    state = config.state
    if not state.fleet_secret:  # `vixio serve` refused this config already (vixio/config/preflight.py)
        raise ValueError(FLEET_SECRET_MISSING)
    return RedisBus(
        state.url,
        name,
        password=state.password,
        prefix=state.prefix,
        serve=serve,
        member=member,
        ttl=config.server.directory_ttl,
        secret=state.fleet_secret,
        also_accepted=[state.fleet_secret_rotating] if state.fleet_secret_rotating else [],
    )


class RedisBus:
    """This process on the fleet's bus: asks other instances' workers, and (a worker) answers them."""

    def __init__(
        self,
        url: str,
        name: str,
        *,
        password: str | None = None,
        prefix: str = "vixio:",
        serve: Serve | None = None,
        member: bool | None = None,
        ttl: float = 30.0,
        secret: str,
        also_accepted: list[str] | None = None,
    ) -> None:
        self.url = url
        self._prefix = prefix + CHANNELS
        self._members_key = prefix + MEMBERS
        self._password = password
        self.name = name
        """This process's holder name ("host-2/w0"), or the supervisor's ("host-2/supervisor")."""
        self.ttl = ttl
        self.serve = serve
        """Answers the calls that reach this process; None: it only asks."""
        self.member = serve is not None if member is None else member
        """Listed among the fleet's workers (a supervisor answers a few calls but holds no session)."""
        self._redis: Any = None
        self._pending: dict[str, asyncio.Future[PeerReply]] = {}
        self._ids = itertools.count(1)
        self._members: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._subscribed = asyncio.Event()
        self._failures = LogThrottle(first=1, every=60.0)
        self.signer = BusSigner(secret, also_accepted=also_accepted or [], channel=self.channel)
        """Seals what this process sends, opens what it receives (bus_auth.py)."""

    @property
    def channel(self) -> str:
        return self._prefix + self.name

    async def start(self) -> None:
        """Connect and subscribe (a worker also joins the members); Redis down: retried in the background."""
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        extra = {} if self._password is None else {"password": self._password}
        # Bounded: 100 devices connecting at once publish 100 calls at once, and an unbounded pool
        # would open a connection (connect, handshake, health check) for most of them. One retry,
        # at once: after a Redis restart the pooled connections are dead and the first call on
        # each would fail (a stale session on another instance left open); the retry reconnects.
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=MAX_CONNECTIONS,
            timeout=5,
            socket_connect_timeout=5,
            health_check_interval=15,
            retry=Retry(NoBackoff(), 1),
            **extra,
        )
        self._redis = aioredis.Redis.from_pool(pool)
        try:
            async with asyncio.timeout(5):
                taken = sum(count for _, count in await self._redis.pubsub_numsub(self.channel))
        except Exception as exc:  # noqa: BLE001 - Redis down at start: the listener retries and says so
            log.warning("fleet bus: cannot check that the name {} is free: {}", self.name, exc or type(exc).__name__)
            taken = 0
        if taken:
            await self._redis.aclose()
            self._redis = None
            raise BusNameTaken(
                f"another vixio on the fleet's Redis ({_safe(self.url)}) already runs as {self.name!r}: "
                "give each instance its own server.instance"
            )
        self._loops = [
            asyncio.create_task(self._listen_forever(), name="vixio-bus-listen"),
            asyncio.create_task(self._members_forever(), name="vixio-bus-members"),
        ]
        with suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), 5)

    async def close(self) -> None:
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        if self.member and self._redis is not None:
            with suppress(Exception):  # a Redis that stopped answering must not hold the shutdown
                async with asyncio.timeout(LEAVE_TIMEOUT):
                    await self._redis.hdel(self._members_key, self.name)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for future in self._pending.values():
            future.cancel()
        if self._redis is not None:
            with suppress(Exception):
                await self._redis.aclose()

    # --- RemotePeers ---------------------------------------------------------------------------

    def holders(self) -> list[str]:
        now = time.time()
        return [name for name, expires in self._members.items() if expires > now and name != self.name]

    async def request(self, holder: str, method: str, path: str, *, json: Any, timeout: float) -> PeerReply:
        if self._redis is None:
            return PeerReply(holder, 502, {"error": f"worker {holder}: not connected to the fleet's Redis"})
        call_id = f"{self.name}:{next(self._ids)}"
        future: asyncio.Future[PeerReply] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        message = self.signer.seal(
            self._prefix + holder,
            {"id": call_id, "reply_to": self.channel, "method": method, "path": path, "json": json},
        )
        try:
            async with asyncio.timeout(timeout):
                if await self._redis.publish(self._prefix + holder, message) == 0:
                    return PeerReply(holder, 502, {"error": f"worker {holder} is not on the fleet's bus"})
                return await future
        except TimeoutError:
            return PeerReply(holder, 502, {"error": f"worker {holder} did not answer within {timeout:g} s"})
        except Exception as exc:  # noqa: BLE001 - Redis unreachable: the call fails, the caller goes on
            return PeerReply(holder, 502, {"error": f"worker {holder}: Redis: {exc or type(exc).__name__}"})
        finally:
            self._pending.pop(call_id, None)

    # --- the subscription ----------------------------------------------------------------------

    async def _listen_forever(self) -> None:
        delay = RECONNECT_FIRST
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self._subscribed.set()
                if self._failures.total:
                    log.info("fleet bus: subscribed to {} again", self.channel)
                    self._failures = LogThrottle(first=1, every=60.0)
                delay = RECONNECT_FIRST
                while True:
                    message = await pubsub.get_message(timeout=5.0)
                    if message is not None:
                        self._received(message.get("data"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis went away: subscribe again after a back-off
                if self._failures.hit() is not None:
                    log.error(
                        "fleet bus: Redis at {} unreachable ({}); calls to other instances fail until it is back",
                        _safe(self.url),
                        exc or type(exc).__name__,
                    )
            finally:
                with suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(RECONNECT_MAX, delay * 2)

    def _received(self, data: Any) -> None:
        try:
            if not isinstance(data, bytes | str) or len(data) > MAX_MESSAGE_BYTES:
                raise Refused("oversized")
            message = self.signer.open(data)
        except Refused as refusal:
            self.signer.dropped(refusal, len(data) if isinstance(data, bytes | str) else 0)
            return
        try:
            if "re" in message:
                future = self._pending.get(str(message["re"]))
                if future is not None and not future.done():
                    future.set_result(PeerReply(str(message["from"]), int(message["status"]), message["body"]))
                return
            call_id, reply_to = str(message["id"]), str(message["reply_to"])
            method, path, body = str(message["method"]), str(message["path"]), message.get("json")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("fleet bus: dropped a malformed message on {}: {}", self.channel, exc)
            return
        if not reply_to.startswith(self._prefix):
            return
        self._spawn(self._answer(call_id, reply_to, method, path, body))

    async def _answer(self, call_id: str, reply_to: str, method: str, path: str, body: Any) -> None:
        if self.serve is None:
            reply = PeerReply(self.name, 404, {"error": f"{self.name} serves no calls"})
        elif len(self._tasks) > MAX_IN_FLIGHT:
            reply = PeerReply(self.name, 503, {"error": f"{self.name} is busy"})
        else:
            reply = await self.serve(method, path, body)
        answer = {"re": call_id, "from": self.name, "status": reply.status, "body": reply.body}
        with suppress(Exception):  # the caller times out on its own
            await self._redis.publish(reply_to, self.signer.seal(reply_to, answer))

    # --- members -------------------------------------------------------------------------------

    async def refresh_members(self) -> list[str]:
        """Read the members now (`holders()` is otherwise up to 2 s old); as `holders()`."""
        with suppress(Exception):
            async with asyncio.timeout(5):
                await self._refresh(renew=False)
        return self.holders()

    async def subscribed(self, suffix: str) -> list[str] | None:
        """The names of the processes whose channel ends with `suffix` and is subscribed now
        (`PUBSUB CHANNELS`: a process is listed from the moment it subscribes, before it is a
        member); None when Redis cannot say."""
        pattern = _glob_escape(self._prefix) + "*" + _glob_escape(suffix)
        try:
            async with asyncio.timeout(5):
                channels = await self._redis.pubsub_channels(pattern)
        except Exception as exc:  # noqa: BLE001 - Redis unreachable: the caller uses the members
            log.debug("fleet bus: subscribed channels not read: {}", exc)
            return None
        return sorted(_text(channel)[len(self._prefix) :] for channel in channels)

    async def _refresh(self, renew: bool) -> None:
        now = time.time()
        if renew and self.member:
            await self._redis.hset(self._members_key, self.name, now + self.ttl)
        entries = await self._redis.hgetall(self._members_key)
        members = {_text(name): float(expires) for name, expires in entries.items()}
        self._members = members
        gone = [name for name, expires in members.items() if expires < now - self.ttl]
        if renew and gone:  # long dead: tidy the hash
            await self._redis.hdel(self._members_key, *gone)

    async def _members_forever(self) -> None:
        while True:
            try:
                await self._refresh(renew=True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged by the listener; members stay as last seen
                log.debug("fleet bus: members not refreshed: {}", exc)
            await asyncio.sleep(min(2.0, self.ttl / 3))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:  # noqa: BLE001 - one call's trouble must not stop the bus
                log.exception("fleet bus: answering a call failed")

        task = asyncio.get_running_loop().create_task(run(), name="vixio-bus-call")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _safe(url: str) -> str:
    """The URL without its password, for logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def _glob_escape(text: str) -> str:
    """`text` matched literally in a Redis glob pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
