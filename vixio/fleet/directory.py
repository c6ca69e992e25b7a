"""The live-session directory: which process holds which device (the store's `live_sessions`).

Every process that serves devices records each session under its holder name, "w0", "w1" on one
machine, "<instance>/w0" in a fleet (`server.instance`, else the host name), removes it when the
session ends, and sends a heartbeat every `server.directory_ttl / 3` seconds: the entries of a
process killed outright are left out `server.directory_ttl` seconds after its last one. The
supervisor forgets a dead worker's entries at once (vixio/serve/lifecycle.py).

The heartbeat also carries this process's live entries, and the store writes again those it
lost (a Redis restarted without persistence, a FLUSHALL): one write per beat whatever the number
of sessions. An entry written again is checked like a new one, from the other side, at each beat
for `RECHECK_S` seconds: when the device has connected elsewhere meanwhile (its newer session
found nothing to close while the store was empty, or could not reach this process while the
fleet's bus was still reconnecting), this process closes its own, so two processes do not both
act for one device for longer than a beat once Redis is back.

One device, one session. When a device connects while the directory lists an earlier device
session of the same id (on this worker, another, or another instance), that session is closed: the
device has reconnected (a Wi-Fi drop leaves the old TCP connection half-open for minutes), so the
old one is stale, and two processes must never both act for one device (relays, results and the
console address the directory's holder). The newer session wins; sessions that started at the
same instant are ordered by id, so two instances never close each other's. Companions
(`mcp/registerTools` clients) are listed but neither close nor are closed: one app may hold
several connections under one id.

Companions waiting for a device are listed too, under the device's id with the session id
`companion:<their session id>`: a worker where a device connects tells only the workers listed
for its id (vixio/fleet/companions.py), not every worker of the fleet. Such entries are never a
device's holder and never stale.

    directory = SessionDirectory(store, "host-2/w0", close_here=transport.close_session,
                                 close_elsewhere=lambda holder, sid, reason: ...)
    transport.sessions_seen = directory
    await directory.start()            # forgets this holder's old entries, starts the heartbeat
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.fleet.peers import internal_call_route
from vixio.state.store import LiveSession, Store, StoreError

if TYPE_CHECKING:
    from vixio.config.models import VixioConfig
    from vixio.fleet.peers import Peers
    from vixio.transports.xiaozhi.websocket.transport import XiaozhiTransport

log = logger.bind(component="vixio.directory")

PATH = "/internal/directory"
"""A worker's session route: `{"call": "close", "args": {"session_id": ..., "reason": ...}}`."""
COMPANION = "companion:"
"""Session ids of the entries that list a companion under the id of the device it waits for."""
REPLACED = "replaced by a newer connection of this device"
"""The close reason the stale session gets."""
RECHECK_S = 30.0
"""Seconds an entry the store had lost is checked for a newer session of its device at each beat:
longer than the fleet's bus takes to subscribe again after Redis is back (at most 10 s) plus a
call's timeout (5 s), the window in which a newer session elsewhere cannot close this one."""

CloseHere = Callable[[str, str], Awaitable[bool]]
"""(session id, reason) -> whether this process had that session."""
CloseElsewhere = Callable[[str, str, str], Awaitable[bool]]
"""(holder, session id, reason) -> whether that holder had that session."""


def holder_name(instance: str, worker: int) -> str:
    """The directory's name of worker `worker` of `instance` ("" on one machine)."""
    return f"{instance}/w{worker}" if instance else f"w{worker}"


def in_fleet(config: VixioConfig) -> bool:
    """Several instances share the state (`state.backend: redis`)."""
    return config.state.backend == "redis"


def resolve_instance(configured: str | None, fleet: bool) -> str:
    """`server.instance`, else the host name in a fleet (pods and hosts are named apart), else ""."""
    if configured:
        return configured
    return socket.gethostname() if fleet else ""


class SessionDirectory:
    """Records this process's sessions in the store and keeps one session per device."""

    def __init__(
        self,
        store: Store,
        holder: str,
        *,
        ttl: float,
        close_here: CloseHere,
        close_elsewhere: CloseElsewhere | None = None,
    ) -> None:
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self._close_here = close_here
        self.close_elsewhere = close_elsewhere
        """How a session another worker holds is closed (set by vixio/serve/worker.py)."""
        self._recorded: dict[str, asyncio.Task[None]] = {}
        """Sessions by id: the task recording each (its end waits for it, so the order holds)."""
        self._live: dict[str, LiveSession] = {}
        """This process's entries, by session id: what each heartbeat asserts."""
        self._beat: asyncio.Future[list[str]] | None = None
        """The heartbeat's write under way (a session's removal waits for it, or it would list it again)."""
        self._recheck: dict[str, float] = {}
        """Entries the store had lost -> until when (time.monotonic()) each beat checks them."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._beating: asyncio.Task[None] | None = None
        self._failures = LogThrottle(first=1, every=60.0)

    async def start(self, forget: bool = True) -> None:
        """Forget this holder's entries from an earlier run (unless the supervisor did), then beat."""
        try:
            if forget:
                await self.store.forget_sessions([self.holder])
            await self.store.heartbeat(self.holder, self.ttl)
        except StoreError as exc:
            self._failed("start", exc)
        self._beating = asyncio.create_task(self._beat_forever(), name="vixio-directory-heartbeat")

    async def close(self, timeout: float = 5.0) -> None:
        """Stop beating; finish the pending writes (each session's end is recorded by then), for
        at most `timeout` seconds: a store that does not answer must not hold the shutdown."""
        if self._beating is not None:
            self._beating.cancel()
            with suppress(asyncio.CancelledError):
                await self._beating
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("the session directory gave up {} write(s) at shutdown after {:g} s", len(pending), timeout)
            await asyncio.gather(*pending, return_exceptions=True)

    async def holders_of(self, device_id: str) -> list[str] | None:
        """Who holds `device_id` according to the directory, newest first; None when the store
        cannot say (the caller asks every worker instead)."""
        listed = await self._entries(device_id)
        if listed is None:
            return None
        return list(dict.fromkeys(entry.worker for entry in reversed(listed) if not _is_companion(entry)))

    async def companion_holders(self, device_id: str) -> list[str] | None:
        """The holders of companions listed for `device_id` (None when the store cannot say)."""
        listed = await self._entries(device_id)
        if listed is None:
            return None
        return list(dict.fromkeys(entry.worker for entry in listed if _is_companion(entry)))

    async def _entries(self, device_id: str) -> list[LiveSession] | None:
        try:
            return await self.store.live_sessions(device_id)
        except StoreError as exc:
            self._failed("look a device up", exc)
            return None

    def list_companion(self, device_id: str, session_id: str) -> asyncio.Task[None]:
        """List the companion session `session_id` under the device it waits for, until
        `unlist_companion`; the task is the write (awaited before looking the device up)."""
        entry = LiveSession(COMPANION + session_id, device_id, self.holder, time.time())
        self._live[entry.session_id] = entry
        self._recorded[entry.session_id] = task = self._spawn(self._record(entry, replace=False))
        return task

    def unlist_companion(self, session_id: str) -> None:
        self.session_ended(COMPANION + session_id)

    # --- the transport's SessionListener -----------------------------------------------------

    def session_started(self, device_id: str, session_id: str, companion: bool = False) -> None:
        if not device_id:
            return
        entry = LiveSession(session_id, device_id, self.holder, time.time())
        self._live[session_id] = entry
        self._recorded[session_id] = self._spawn(self._record(entry, replace=not companion))

    def session_ended(self, session_id: str) -> None:
        self._live.pop(session_id, None)
        recording = self._recorded.pop(session_id, None)
        if recording is not None:
            self._spawn(self._remove(session_id, recording))

    # --- work --------------------------------------------------------------------------------

    async def _record(self, entry: LiveSession, replace: bool) -> None:
        try:
            await self.store.session_started(entry)
            if not replace:
                return
            listed = await self.store.live_sessions(entry.device_id)
        except StoreError as exc:
            self._failed("record a session", exc)
            return
        for stale in listed:
            if not _is_companion(stale) and (stale.started, stale.session_id) < (entry.started, entry.session_id):
                await self._close(stale)

    async def _close(self, stale: LiveSession) -> None:
        if stale.worker == self.holder:
            closed = await self._close_here(stale.session_id, REPLACED)
        elif self.close_elsewhere is not None:
            closed = await self.close_elsewhere(stale.worker, stale.session_id, REPLACED)
        else:
            closed = False
        if closed:
            log.bind(device=stale.device_id).info(
                "device {} connected again: closed its earlier session {} on {}",
                stale.device_id,
                stale.session_id,
                stale.worker,
            )

    async def _remove(self, session_id: str, recording: asyncio.Task[None]) -> None:
        with suppress(Exception):
            await recording
        if self._beat is not None and not self._beat.done():
            await asyncio.wait({self._beat})
        try:
            await self.store.session_ended(session_id)
        except StoreError as exc:
            self._failed("remove a session", exc)

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            # Only entries already recorded: one whose first write is still queued is not "lost".
            live = [
                entry
                for session_id, entry in self._live.items()
                if (recording := self._recorded.get(session_id)) is not None and recording.done()
            ]
            self._beat = asyncio.ensure_future(self.store.heartbeat(self.holder, self.ttl, live))
            try:
                again = await self._beat
            except StoreError as exc:
                self._failed("send its heartbeat", exc)
                continue
            if again:
                log.warning(
                    "the session directory had lost {} of this process's {} session(s) (the store restarted "
                    "empty?): listed again",
                    len(again),
                    len(self._live),
                )
            now = time.monotonic()
            self._recheck.update((i, now + RECHECK_S) for i in again if not i.startswith(COMPANION))
            for session_id, until in list(self._recheck.items()):
                entry = self._live.get(session_id)
                if entry is None or until < now:
                    del self._recheck[session_id]
                else:
                    self._spawn(self._listed_again(entry))

    async def _listed_again(self, entry: LiveSession) -> None:
        """`entry` was lost by the store: if its device has a newer session, this one is stale."""
        try:
            listed = await self.store.live_sessions(entry.device_id)
        except StoreError as exc:
            self._failed("look a device up", exc)
            return
        if any(
            not _is_companion(other) and (other.started, other.session_id) > (entry.started, entry.session_id)
            for other in listed
        ):
            await self._close(entry)

    def _failed(self, what: str, exc: StoreError) -> None:
        if self._failures.hit() is not None:
            log.warning("the session directory could not {} ({} time(s) so far): {}", what, self._failures.total, exc)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        async def run() -> None:
            try:
                await work
            except Exception:  # noqa: BLE001 - the directory must not end a session
                log.exception("the session directory failed")

        task = asyncio.get_running_loop().create_task(run(), name="vixio-directory")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _is_companion(entry: LiveSession) -> bool:
    return entry.session_id.startswith(COMPANION)


class DirectoryRoute:
    """A worker's `POST /internal/directory`: the directory's calls between workers and instances."""

    def __init__(self, transport: XiaozhiTransport, peers: Peers) -> None:
        self.transport = transport
        self.peers = peers
        self.handle = internal_call_route(self, ("close",))

    async def close(self, session_id: str, reason: str = REPLACED) -> bool:
        """Close this worker's session `session_id`; False if it has none of that id."""
        return await self.transport.close_session(str(session_id), str(reason)[:120])

    async def close_elsewhere(self, holder: str, session_id: str, reason: str) -> bool:
        reply = await self.peers.request(
            holder, "POST", PATH, json={"call": "close", "args": {"session_id": session_id, "reason": reason}}
        )
        if not reply.ok:
            log.warning(
                "cannot close the stale session {} on {}: {}",
                session_id,
                holder,
                reply.body.get("error") if isinstance(reply.body, dict) else reply.status,
            )
        return reply.ok and reply.body.get("result") is True
