"""The supervisor's client for its workers' session routes (`vixio serve --workers N`), and a
worker's for its siblings' (vixio/fleet/companions.py, vixio/app/task_results.py).

Each worker serves its `VixioServer.session_routes` on a private Unix socket in the supervisor's
run directory (mode 0700). The supervisor answers the HTTP port; a route there that needs live
sessions asks the workers through `Peers`:

    replies = await peers.gather("GET", "/api/sessions")       # every ready worker, concurrently
    sessions = [s for r in replies if r.ok for s in r.body["sessions"]]

    reply = await peers.forward_first("POST", f"/api/sessions/{sid}/say", json={"text": "hi"})
    return web.json_response(reply.body, status=reply.status)   # the worker that has the session

So a new session route is written once, as a `SessionRoute` appended to
`VixioServer.session_routes` (it sees that process's sessions; in one process it is served on the
HTTP port as it is, in a worker on its socket), and `Supervisor.__init__` (vixio/serve/supervisor.py) adds,
next to `/metrics`, the HTTP-port handler that combines the workers' answers: `gather` and merge for listings
and counters, `forward_first` for anything addressed to one session (a worker without that
session answers 404), `forward_any` for stateless work that needs a worker's models.
"""

from __future__ import annotations

import asyncio
import itertools
import json as jsonlib
import re
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from vixio.core.json_limits import loads_bounded

DEFAULT_TIMEOUT = 5.0
"""Seconds a worker has to answer; a worker busy longer than that is reported, not waited for."""


@dataclass(frozen=True, slots=True)
class PeerReply:
    """One worker's answer."""

    worker: str
    """The worker's holder name: "w0", "w1", ... on one machine, "host-2/w0" in a fleet."""
    status: int
    """HTTP status; 502 when the worker could not be reached or did not answer in time."""
    body: Any
    """The JSON body (or `{"error": text}` for a non-JSON answer or an unreachable worker)."""
    content_type: str = "application/json"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class RemotePeers(Protocol):
    """The workers of the other instances of a fleet (vixio/fleet/bus.py reaches them over Redis)."""

    def holders(self) -> list[str]:
        """The other instances' workers that are alive now."""
        ...

    async def request(self, holder: str, method: str, path: str, *, json: Any, timeout: float) -> PeerReply:
        """`holder`'s answer to `method path` with a JSON body (502 when it cannot be reached)."""
        ...


def holder_order(holder: str) -> tuple[str, int, str]:
    """Sort key: by instance, then worker number ("w2" before "w10")."""
    instance, _, worker = holder.rpartition("/")
    number = re.fullmatch(r"w(\d+)", worker)
    return (instance, int(number.group(1)) if number else -1, worker)


def worker_number(holder: str) -> int:
    """The worker's number in its instance ("host-2/w1" -> 1)."""
    return holder_order(holder)[1]


def instance_of(holder: str) -> str:
    """The instance of a holder ("" on one machine)."""
    return holder.rpartition("/")[0]


class Peers:
    """HTTP over each ready worker's Unix socket, and to the fleet's other workers through `remote`."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, remote: RemotePeers | None = None) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._default_timeout = timeout
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._turn = itertools.count()
        self._closing: set[asyncio.Task[None]] = set()
        self.remote = remote
        """The other instances' workers (a fleet on Redis); None on one machine."""

    @property
    def local(self) -> list[str]:
        """This machine's workers that can be asked now, in order."""
        return sorted(self._sessions, key=holder_order)

    @property
    def workers(self) -> list[str]:
        """Every worker that can be asked now, this instance's first, then the fleet's."""
        remote = [] if self.remote is None else [h for h in self.remote.holders() if h not in self._sessions]
        return self.local + sorted(remote, key=holder_order)

    def add(self, worker: str, socket_path: str) -> None:
        """Worker `worker` is ready and serves on `socket_path` (replaces an earlier one)."""
        self.discard(worker)
        connector = aiohttp.UnixConnector(path=socket_path, limit=32)
        self._sessions[worker] = aiohttp.ClientSession(connector=connector, timeout=self._timeout)

    def discard(self, worker: str) -> None:
        """Worker `worker` is gone (stopped or restarting)."""
        session = self._sessions.pop(worker, None)
        if session is not None:
            # Closing only drops pooled connections; do it in the background so callers stay sync.
            closing = asyncio.get_running_loop().create_task(session.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(session.close() for session in sessions), *self._closing, return_exceptions=True)

    async def request(
        self,
        worker: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> PeerReply:
        """One worker's answer to `method path` (within `timeout` seconds, else the default);
        never raises for an unreachable worker (502). Another instance's worker takes JSON only."""
        session = self._sessions.get(worker)
        if session is None:
            if self.remote is not None and "/" in worker:
                return await self.remote.request(
                    worker, method, path, json=json, timeout=timeout or self._default_timeout
                )
            return PeerReply(worker, 502, {"error": f"worker {worker} is not running"})
        limit: dict[str, Any] = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        try:
            async with session.request(
                method, f"http://worker{path}", json=json, data=body, headers=headers, **limit
            ) as response:
                raw = await response.read()
                content_type = response.content_type
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return PeerReply(worker, 502, {"error": f"worker {worker} did not answer: {exc or type(exc).__name__}"})
        if content_type == "application/json":
            try:
                return PeerReply(worker, status, jsonlib.loads(raw))
            except ValueError:
                pass
        return PeerReply(worker, status, {"error": raw.decode("utf-8", "replace")}, content_type)

    async def gather(self, method: str, path: str, *, json: Any = None, local: bool = False) -> list[PeerReply]:
        """Every ready worker's answer (only this instance's with `local`), asked concurrently, in order."""
        workers = self.local if local else self.workers
        return list(await asyncio.gather(*(self.request(w, method, path, json=json) for w in workers)))

    async def forward_first(self, method: str, path: str, *, json: Any = None) -> PeerReply:
        """The first answer that is not a 404 (the worker that has the session), asked of every
        worker at once; a 404 when none has it, a 502 when a worker that might have it did not
        answer. Use it only for requests a worker without the
        session refuses with 404 and no side effect."""
        pending = [asyncio.ensure_future(self.request(w, method, path, json=json)) for w in self.workers]
        failed: PeerReply | None = None
        try:
            for next_reply in asyncio.as_completed(pending):
                reply = await next_reply
                if reply.status == 502:
                    failed = failed or reply
                elif reply.status != 404:
                    return reply
        finally:
            for task in pending:
                task.cancel()
        # A worker that did not answer may be the one with the session: say so rather than 404.
        return failed or PeerReply("", 404, {"error": "no worker has it"})

    async def forward_any(
        self, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> PeerReply:
        """One worker of this instance's answer, the workers taking turns (stateless work that needs models)."""
        workers = self.local
        if not workers:
            return PeerReply("", 503, {"error": "no worker is ready"})
        worker = workers[next(self._turn) % len(workers)]
        return await self.request(worker, method, path, body=body, headers=headers)


class CallError(Exception):
    """A call a worker's route refuses; `status` is the HTTP status to answer with (the console's
    `ConsoleError` is one)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def internal_call_route(backend: Any, calls: tuple[str, ...]) -> Any:
    """A worker's handler for `POST {"call": NAME, "args": {...}}` on its private socket: awaits
    `backend.NAME(**args)` for a NAME in `calls` and answers `{"result": ...}` or `{"error": ...}`."""

    async def handle(request: web.Request) -> web.Response:
        try:
            body = loads_bounded(await request.read())
        except ValueError as exc:  # JsonTooDeep included
            return web.json_response({"error": f"the body is not JSON: {exc}"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        call, args = body.get("call"), body.get("args") or {}
        if call not in calls or not isinstance(args, dict):
            return web.json_response({"error": f"call must be one of {calls}"}, status=400)
        try:
            result = await getattr(backend, call)(**args)
        except CallError as exc:
            return web.json_response({"error": exc.message}, status=exc.status)
        except TypeError as exc:
            return web.json_response({"error": f"bad arguments for {call}: {exc}"}, status=400)
        return web.json_response({"result": result})

    return handle
