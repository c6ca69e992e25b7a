"""The supervisor's client for its workers' session routes (`vixio serve --workers N`), and a
worker's for its siblings' (vixio/serve/companions.py, vixio/task_results.py).

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
from dataclasses import dataclass
from typing import Any

import aiohttp

DEFAULT_TIMEOUT = 5.0
"""Seconds a worker has to answer; a worker busy longer than that is reported, not waited for."""


@dataclass(frozen=True, slots=True)
class PeerReply:
    """One worker's answer."""

    worker: int
    """The worker's index (w0, w1, ...)."""
    status: int
    """HTTP status; 502 when the worker could not be reached or did not answer in time."""
    body: Any
    """The JSON body (or `{"error": text}` for a non-JSON answer or an unreachable worker)."""
    content_type: str = "application/json"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class Peers:
    """HTTP over each ready worker's Unix socket."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._turn = itertools.count()
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def workers(self) -> list[int]:
        """Indexes of the workers that can be asked now, in order."""
        return sorted(self._sessions)

    def add(self, worker: int, socket_path: str) -> None:
        """Worker `worker` is ready and serves on `socket_path` (replaces an earlier one)."""
        self.discard(worker)
        connector = aiohttp.UnixConnector(path=socket_path, limit=32)
        self._sessions[worker] = aiohttp.ClientSession(connector=connector, timeout=self._timeout)

    def discard(self, worker: int) -> None:
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

    async def request(self, worker: int, method: str, path: str, *, json: Any = None,
                      body: bytes | None = None, headers: dict[str, str] | None = None,
                      timeout: float | None = None) -> PeerReply:
        """One worker's answer to `method path` (within `timeout` seconds, else the default);
        never raises for an unreachable worker (502)."""
        session = self._sessions.get(worker)
        if session is None:
            return PeerReply(worker, 502, {"error": f"worker w{worker} is not running"})
        limit = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        try:
            async with session.request(method, f"http://w{worker}{path}", json=json, data=body,
                                       headers=headers, **limit) as response:
                raw = await response.read()
                content_type = response.content_type
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return PeerReply(worker, 502, {"error": f"worker w{worker} did not answer: {exc or type(exc).__name__}"})
        if content_type == "application/json":
            try:
                return PeerReply(worker, status, jsonlib.loads(raw))
            except ValueError:
                pass
        return PeerReply(worker, status, {"error": raw.decode("utf-8", "replace")}, content_type)

    async def gather(self, method: str, path: str, *, json: Any = None) -> list[PeerReply]:
        """Every ready worker's answer, asked concurrently, in worker order."""
        return list(await asyncio.gather(*(self.request(w, method, path, json=json) for w in self.workers)))

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
        return failed or PeerReply(-1, 404, {"error": "no worker has it"})

    async def forward_any(self, method: str, path: str, *, body: bytes | None = None,
                          headers: dict[str, str] | None = None) -> PeerReply:
        """One worker's answer, the workers taking turns (stateless work that needs models)."""
        workers = self.workers
        if not workers:
            return PeerReply(-1, 503, {"error": "no worker is ready"})
        worker = workers[next(self._turn) % len(workers)]
        return await self.request(worker, method, path, body=body, headers=headers)
