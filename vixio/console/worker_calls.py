"""The console over `vixio serve --workers N`: each worker's sessions, reached over its socket.

A worker serves its `LocalBackend` as one session route, `POST /internal/console` with
`{"call": "sessions" | "session" | "tools" | "execute" | "say" | "reassign" | "memory_changed",
"args": {...}}` (only on its private Unix socket: the supervisor has already checked the
operator). `WorkerBackend` is the
supervisor's `ConsoleBackend` for one worker; a `FanOutBackend` over one per ready worker is
what the supervisor's console serves, so the page sees every worker's sessions as one server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vixio.console.backend import ConsoleBackend, ConsoleError
from vixio.fleet.peers import instance_of, internal_call_route, worker_number

if TYPE_CHECKING:
    from vixio.fleet.peers import Peers

PATH = "/internal/console"
_CALLS = ("sessions", "session", "tools", "execute", "say", "reassign", "memory_changed")


def worker_route(backend: ConsoleBackend) -> Any:
    """The worker's handler for `POST /internal/console` (a `SessionRoute` of `VixioServer`)."""
    return internal_call_route(backend, _CALLS)


class WorkerBackend:
    """One worker's console backend, from the supervisor."""

    def __init__(self, peers: Peers, worker: str) -> None:
        self._peers = peers
        self.worker = worker

    async def _call(self, call: str, **args: Any) -> Any:
        reply = await self._peers.request(self.worker, "POST", PATH, json={"call": call, "args": args})
        if not reply.ok:
            error = reply.body.get("error") if isinstance(reply.body, dict) else None
            raise ConsoleError(str(error or f"worker {self.worker} answered {reply.status}"), reply.status)
        return reply.body["result"]

    async def _object(self, call: str, **args: Any) -> dict[str, Any]:
        """`_call` for a call that answers one JSON object."""
        result = await self._call(call, **args)
        if not isinstance(result, dict):
            raise ConsoleError(
                f"worker {self.worker} answered {call} with a {type(result).__name__}, not an object", 502
            )
        return result

    async def _objects(self, call: str, **args: Any) -> list[dict[str, Any]]:
        """`_call` for a call that answers a list of JSON objects."""
        result = await self._call(call, **args)
        if not isinstance(result, list) or not all(isinstance(each, dict) for each in result):
            raise ConsoleError(f"worker {self.worker} answered {call} with something else than a list of objects", 502)
        return result

    async def sessions(self) -> list[dict[str, Any]]:
        sessions = await self._objects("sessions")
        for session in sessions:
            self._mark(session)
        return sessions

    async def session(self, session_id: str) -> dict[str, Any]:
        return await self._object("session", session_id=session_id)

    async def tools(self, session_id: str | None) -> dict[str, Any]:
        return await self._object("tools", session_id=session_id)

    async def execute(self, session_id: str | None, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self._object("execute", session_id=session_id, tool=tool, arguments=arguments)

    async def say(self, session_id: str, text: str) -> dict[str, Any]:
        return await self._object("say", session_id=session_id, text=text)

    def _mark(self, session: dict[str, Any]) -> None:
        """Which worker (and in a fleet, which instance) holds `session`."""
        session.setdefault("worker", worker_number(self.worker))
        if instance_of(self.worker):
            session.setdefault("instance", instance_of(self.worker))

    async def reassign(self, device_id: str, profile: str | None) -> list[dict[str, Any]]:
        switched = await self._objects("reassign", device_id=device_id, profile=profile)
        for session in switched:
            self._mark(session)
        return switched

    async def memory_changed(self, device_id: str, what: str, conversation: str = "", seq: int = -1) -> int:
        return int(
            await self._call("memory_changed", device_id=device_id, what=what, conversation=conversation, seq=seq)
        )
