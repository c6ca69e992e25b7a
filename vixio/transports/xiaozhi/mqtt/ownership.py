"""Several vixio instances on one external broker: which one serves each device.

Every instance subscribes to every device's `up` topic (the broker cannot route a device that
never subscribes to one of several servers), so every instance receives every message. The one
that serves the device is the one that claims it in the state store at its `hello`
(`Store.claim`, atomic: of instances racing for the same hello exactly one wins); the others drop
the device's messages without a word. The claim is held for `CLAIM_TTL` seconds, renewed every
`RENEW_EVERY` while the device has a session here and at each of its hellos, so the device's
next sessions stay on the same instance while it is in use; a device idle past the lease is
claimed afresh at its next hello (whichever instance is quickest then: the least loaded one,
in effect), and an instance that dies leaves its devices to lapse within `CLAIM_TTL`.

Why not MQTT 5 shared subscriptions (`$share/vixio/vixio/+/up`, which mosquitto 2 has): the
broker spreads them per message, not per device, so a session's `listen` and `abort` would
reach instances that do not hold it. A device's messages that arrive while its claim is being
decided wait for it (at most `MAX_WAITING`), so they are handled in order by the winner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from loguru import logger

CLAIM_TTL = 30.0
"""Seconds a claim holds without renewal: how long a dead instance's devices stay unanswered."""
RENEW_EVERY = 10.0
MAX_WAITING = 32
"""Messages of one device kept while its claim is decided (the hello, `listen`, a few more)."""
MARGIN = 5.0
"""This process stops acting for a device this long before the store's claim lapses (clocks and
round trips: two instances never both think they hold it)."""

Claim = Callable[[str, str, float], Awaitable[str]]
Release = Callable[[str, str], Awaitable[bool]]

log = logger.bind(component="mqtt")


class DeviceOwnership:
    """Claims devices for this process (`holder`) and gates their messages."""

    def __init__(self, claim: Claim, release: Release, holder: str, active: Callable[[], Iterable[str]]) -> None:
        self._claim, self._release, self.holder = claim, release, holder
        self._active = active
        """Devices with a session here now (their claims are renewed)."""
        self._mine: dict[str, float] = {}
        """Devices this process holds, until (monotonic) it must renew first."""
        self._waiting: dict[str, list[Callable[[], None]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._renewer: asyncio.Task[None] | None = None
        self.elsewhere = 0
        """Messages dropped because another instance serves their device."""

    def start(self) -> None:
        self._renewer = asyncio.get_running_loop().create_task(self._renew_forever(), name="vixio-mqtt-claims")

    async def stop(self) -> None:
        tasks = [t for t in [self._renewer, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for device_id in list(self._mine):  # the next instance need not wait for the lease
            await asyncio.gather(self._release(name(device_id), self.holder), return_exceptions=True)
        self._mine.clear()

    def offer(self, device_id: str, hello: bool, handle: Callable[[], None]) -> None:
        """`handle` one message of `device_id` now (this process serves it), once its claim is
        decided (a `hello` while nobody here holds it), or never (another instance serves it)."""
        waiting = self._waiting.get(device_id)
        if waiting is not None:
            if len(waiting) < MAX_WAITING:
                waiting.append(handle)
            return
        if self.holds(device_id):
            handle()
            if hello:
                self._spawn(self._decide(device_id, renew=True))
            return
        if not hello:
            self.elsewhere += 1
            return
        self._waiting[device_id] = [handle]
        self._spawn(self._decide(device_id, renew=False))

    def holds(self, device_id: str) -> bool:
        return self._mine.get(device_id, 0.0) > time.monotonic()

    def gone(self, device_id: str) -> None:
        """The device left the broker: its next connection may go anywhere."""
        if self._mine.pop(device_id, None) is not None:
            self._spawn(self._give_up(device_id))

    async def _give_up(self, device_id: str) -> None:
        await self._release(name(device_id), self.holder)

    async def _decide(self, device_id: str, *, renew: bool) -> None:
        try:
            holder = await self._claim(name(device_id), self.holder, CLAIM_TTL)
        except Exception as exc:  # the store is unreachable: serve it rather than leave it unanswered
            log.bind(device=device_id).warning("claim of {} not decided ({}): served here", device_id, exc)
            holder = self.holder
        if holder == self.holder:
            self._mine[device_id] = time.monotonic() + CLAIM_TTL - MARGIN
        else:
            self._mine.pop(device_id, None)
            if renew:
                log.bind(device=device_id).warning("{} is now served by {}", device_id, holder)
        waiting = self._waiting.pop(device_id, [])
        if holder != self.holder:
            self.elsewhere += len(waiting)
            log.bind(device=device_id).debug(
                "{} is served by {}: {} message(s) left to it", device_id, holder, len(waiting)
            )
            return
        for handle in waiting:
            handle()

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY)
            for device_id in list(self._active()):
                await self._decide(device_id, renew=True)

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("a device claim failed")

        task = asyncio.get_running_loop().create_task(run(), name="vixio-mqtt-claim")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def name(device_id: str) -> str:
    """The claim's name in the store."""
    return f"mqtt:{device_id}"
