"""Devices go to the worker holding the fewest connections (`vixio serve --workers N`).

With SO_REUSEPORT the kernel hashes each connection to a worker: 200 devices land ±7 apart on
two workers (one standard deviation), often 110 against 90, and a WebSocket stays where it
landed for hours. The busier worker then answers everyone on it later (on the 2-core bench, at
200 devices: 108 against 92 sessions, its turns' server part p95 534 against 396 ms). So the
supervisor accepts on the WebSocket port itself and hands each accepted socket, before a byte of
it is read, to the ready worker with the fewest open connections, over a Unix socket pair
(`SCM_RIGHTS`). The worker adopts it into its WebSocket server as if it had accepted it, and
writes one byte back when it closes. The supervisor only accepts and passes descriptors: the
handshake and every frame are the worker's.

    supervisor: Dispatcher(listener) ─ accept ─► least-loaded worker's channel ─► fd
    worker:     Adopter(channel, adopt) ─ recv fd ─► adopt_into(websocket server, socket) ─ closed ─► b"-"
                                        ─ every BEAT_EVERY s, from its event loop ─────────────────► b"+"

A worker whose loop is stuck (frozen, or blocked in a call that never returns) still has its
process and its channel, but would adopt nothing: its beats stop, and once none came for
`STALE_AFTER` s it gets no new device while another worker's loop turns, and the supervisor's
`/healthz` answers 503 when no worker's does (`Dispatcher.turning`), so a balancer sends the
devices to another instance. Each change is one log line.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from websockets.asyncio.server import Server

from vixio.core.log_throttle import LogThrottle
from vixio.patches.websockets import protocol_factory

log = logger.bind(component="vixio.dispatch")

CLOSED = b"-"
"""What a worker writes back, one byte per adopted connection that closed."""
BEAT = b"+"
"""What a worker's event loop writes every `BEAT_EVERY` seconds: it turns."""
BEAT_EVERY = 0.5
STALE_AFTER = 3.0
"""Seconds without a beat after which a worker's loop counts as stuck: a busy 2-core machine
delays a beat by a few hundred ms at most; a balancer's check then sees it within one interval."""


@dataclass
class Channel:
    """The supervisor's end of one worker's descriptor channel."""

    index: int
    sock: socket.socket
    open_connections: int = 0
    ready: bool = False
    handed: int = field(default=0)
    """Connections handed to this worker since it started (for logs and tests)."""
    last_beat: float = 0.0
    """time.monotonic() of the latest byte from the worker (a beat or a closed report)."""
    stuck: bool = False
    """No byte for `STALE_AFTER` s (as last checked, for the log lines)."""

    def turning(self, now: float) -> bool:
        """Ready, and its event loop wrote within `STALE_AFTER` s."""
        return self.ready and now - self.last_beat <= STALE_AFTER


class Dispatcher:
    """Accepts on the WebSocket port and hands each connection to the least-loaded ready worker."""

    def __init__(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self.listener = listener
        self.channels: dict[int, Channel] = {}
        self._task: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._none_turning = False
        self._worker_ready = asyncio.Event()
        self._accept_errors = LogThrottle(first=1, every=10.0)

    def attach(self, index: int) -> socket.socket:
        """A new channel for worker `index` (replacing a dead worker's); returns the worker's end,
        to pass to its process."""
        self.detach(index)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        self.channels[index] = Channel(index, ours)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._closed_reports, index)
        return theirs

    def ready(self, index: int) -> None:
        """Worker `index` answers: hand it connections from now on."""
        channel = self.channels.get(index)
        if channel is not None:
            channel.ready = True
            channel.last_beat = time.monotonic()
            self._worker_ready.set()

    def turning(self, index: int | None = None) -> bool:
        """Whether worker `index`'s event loop turns (any worker's without `index`)."""
        now = time.monotonic()
        if index is not None:
            channel = self.channels.get(index)
            return channel is not None and channel.turning(now)
        return any(c.turning(now) for c in self.channels.values())

    def detach(self, index: int) -> None:
        """Worker `index` is gone: its connections died with it."""
        channel = self.channels.pop(index, None)
        if channel is not None:
            with suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(channel.sock.fileno())
            channel.sock.close()
        if not any(c.ready for c in self.channels.values()):
            self._worker_ready.clear()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._accept_forever(), name="vixio-dispatch")
            self._watch = asyncio.create_task(self._watch_beats(), name="vixio-dispatch-beats")

    async def stop(self) -> None:
        for task in (self._task, self._watch):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._watch = None
        for index in list(self.channels):
            self.detach(index)
        self.listener.close()

    def least_loaded(self, skip: frozenset[int] = frozenset()) -> Channel | None:
        """The ready worker with the fewest connections among those whose loop turns; when none
        turns, among all ready ones (the connection waits in its channel until that loop turns)."""
        ready = [c for c in self.channels.values() if c.ready and c.index not in skip]
        now = time.monotonic()
        ready = [c for c in ready if c.turning(now)] or ready
        return min(ready, key=lambda c: (c.open_connections, c.index)) if ready else None

    async def _watch_beats(self) -> None:
        """One log line when a worker's loop stops or starts turning again, and when none turns."""
        while True:
            await asyncio.sleep(BEAT_EVERY)
            now = time.monotonic()
            for channel in list(self.channels.values()):
                if not channel.ready:
                    continue
                stuck = not channel.turning(now)
                if stuck and not channel.stuck:
                    log.warning(
                        "worker w{}'s event loop has not turned for {:.1f} s; it gets no new device until it does",
                        channel.index,
                        now - channel.last_beat,
                    )
                elif channel.stuck and not stuck:
                    log.info("worker w{}'s event loop turns again", channel.index)
                channel.stuck = stuck
            ready = [c for c in self.channels.values() if c.ready]
            none_turning = bool(ready) and not any(c.turning(now) for c in ready)
            if not ready:  # none started yet or all restarting: their own log lines say so
                self._none_turning = False
            elif none_turning != self._none_turning:
                if none_turning:
                    log.error("no worker's event loop turns: /healthz answers 503 until one does")
                else:
                    log.info("a worker's event loop turns: /healthz answers 200 again")
                self._none_turning = none_turning

    async def _accept_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._worker_ready.wait()  # meanwhile connections wait in the listen backlog
            try:
                conn, _ = await loop.sock_accept(self.listener)
            except OSError as exc:  # e.g. out of descriptors: keep serving once they free up
                if self._accept_errors.hit() is not None:  # one line, then one per 10 s
                    log.warning("accept failed: {} ({} time(s) so far)", exc, self._accept_errors.total)
                await asyncio.sleep(0.1)
                continue
            with conn:
                self.hand_over(conn)

    def hand_over(self, conn: socket.socket) -> bool:
        """Pass `conn` to the least-loaded ready worker; False (the device is cut off) if none
        could take it. The caller closes its own copy of the descriptor either way."""
        skip: set[int] = set()
        while (channel := self.least_loaded(frozenset(skip))) is not None:
            try:
                socket.send_fds(channel.sock, [b"c"], [conn.fileno()])
            except BlockingIOError:  # a worker too busy to read its channel: another takes this one
                log.warning("worker w{} is not reading its connections; handing this one elsewhere", channel.index)
                skip.add(channel.index)
                continue
            except OSError as exc:  # the worker just died: its watcher replaces it
                log.warning("cannot hand a connection to worker w{}: {}", channel.index, exc)
                self.detach(channel.index)
                continue
            channel.open_connections += 1
            channel.handed += 1
            return True
        log.warning("no worker can take a connection; closing it")
        return False

    def _closed_reports(self, index: int) -> None:
        channel = self.channels.get(index)
        if channel is None:
            return
        try:
            data = channel.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the worker's end closed: it exited (its watcher restarts it)
            self.detach(index)
            return
        channel.last_beat = time.monotonic()
        channel.open_connections = max(0, channel.open_connections - data.count(CLOSED))


Adopt = Callable[[socket.socket, Callable[[], None]], Awaitable[None]]


async def adopt_into(server: Server, sock: socket.socket, on_closed: Callable[[], None]) -> None:
    """Serve `sock`, accepted by the supervisor, as if `server` had accepted it; `on_closed`
    runs when the connection closes."""
    factory = protocol_factory(server)  # a private read: see vixio.patches.websockets

    def protocol() -> Any:
        connection = factory()
        lost = connection.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            try:
                lost(exc)
            finally:
                on_closed()

        connection.connection_lost = connection_lost
        return connection

    await asyncio.get_running_loop().connect_accepted_socket(protocol, sock)


class Adopter:
    """The worker's end: adopts every socket the supervisor passes, reports each one closed, and
    beats while its event loop turns."""

    def __init__(self, channel: socket.socket, adopt: Adopt) -> None:
        channel.setblocking(False)
        self.channel = channel
        self._adopt = adopt
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(channel.fileno(), self._receive)
        self.adopted = 0
        self._beats = self._loop.create_task(self._beat_forever(), name="vixio-dispatch-beat")

    def close(self) -> None:
        self._beats.cancel()
        with suppress(ValueError, OSError):
            self._loop.remove_reader(self.channel.fileno())
        self.channel.close()

    async def _beat_forever(self) -> None:
        """Written from this loop, so a beat comes only while the loop turns."""
        while True:
            with suppress(OSError):  # a full channel (supervisor hung) or gone: the next one
                self.channel.send(BEAT)
            await asyncio.sleep(BEAT_EVERY)

    def _receive(self) -> None:
        while True:
            try:
                # One byte per descriptor, so a read never carries more descriptors than it has room for.
                message, fds, _, _ = socket.recv_fds(self.channel, 32, 32)
            except BlockingIOError:
                return
            except OSError:
                message, fds = b"", []
            for fd in fds:
                self._start(socket.socket(fileno=fd))
            if not message:  # the supervisor is gone; the stdin watch stops this worker
                self.close()
                return

    def _start(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.adopted += 1
        task = self._loop.create_task(self._adopt_one(sock), name="vixio-adopt")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _adopt_one(self, sock: socket.socket) -> None:
        try:
            await self._adopt(sock, self._report_closed)
        except Exception as exc:  # noqa: BLE001 - one bad socket must not stop the others
            log.warning("could not adopt a connection: {}", exc)
            sock.close()
            self._report_closed()

    def _report_closed(self) -> None:
        with suppress(OSError):  # a full channel (supervisor hung) or gone: nothing to tell
            self.channel.send(CLOSED)
