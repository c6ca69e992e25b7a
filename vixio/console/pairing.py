"""The console's companions: who asks to pair with a device, who is let in, and the operator's answer.

    GET  /api/pairing           {"pending": [...], "companions": [...], "approved": [...]}
    POST /api/pairing/approve   {"id": PAIRING_ID} → remembered; the waiting companion pairs now
    POST /api/pairing/revoke    {"id": PAIRING_ID} → the approval is forgotten and live companions
                                with that id are unpaired (tools gone, messages stopped)

A pairing id names one companion (its Device-Id and Client-Id) and one device MAC; it is the
same in every process and run (pairing_store.CompanionKey.id). Approvals are written by the
process serving the console (the only one, or the supervisor of `vixio serve --workers N`);
workers hold the companions, so every call about live companions goes to each worker
(`/internal/pairing` on its private socket), and each re-reads the approvals file anyway when a
companion registers. Operator routes only (the console API's guard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web
from loguru import logger

from vixio.console.backend import ConsoleError
from vixio.console.replies import json_body, json_reply
from vixio.fleet.peers import instance_of, internal_call_route, worker_number
from vixio.transports.xiaozhi.companions.pairing import CompanionRegistry
from vixio.transports.xiaozhi.companions.store import CompanionKey, PairingStore

if TYPE_CHECKING:
    from vixio.fleet.peers import Peers

T = TypeVar("T")
WORKER_PATH = "/internal/pairing"
_CALLS = ("state", "refresh", "unpair")
MAX_ID_CHARS = 32


class PairingBackend(Protocol):
    """The live companions of one process, or of every worker."""

    async def state(self) -> dict[str, list[dict[str, Any]]]:
        """`pending` approval and let in (`companions`), as `CompanionRegistry.snapshot`."""
        ...

    async def refresh(self) -> None:
        """Apply the approvals as they are now (a pending companion just approved pairs)."""
        ...

    async def unpair(self, pairing_id: str) -> int:
        """Unpair the live companions with this id; how many there were."""
        ...


class LocalPairing:
    """This process's companions."""

    def __init__(self, registry: CompanionRegistry) -> None:
        self.registry = registry

    async def state(self) -> dict[str, list[dict[str, Any]]]:
        return self.registry.snapshot()

    async def refresh(self) -> None:
        if self.registry.policy is not None:
            await self.registry.policy.store.sync()  # approvals made by another process
        await self.registry.refresh()

    async def unpair(self, pairing_id: str) -> int:
        if self.registry.policy is not None:
            await self.registry.policy.store.sync()  # the revocation, when another process made it
        return self.registry.unpair(pairing_id)


def worker_route(backend: PairingBackend) -> Any:
    """A worker's handler for `POST /internal/pairing` `{"call": ..., "args": {...}}`."""
    return internal_call_route(backend, _CALLS)


class WorkerPairing:
    """One worker's companions, from the supervisor."""

    def __init__(self, peers: Peers, worker: str) -> None:
        self._peers, self.worker = peers, worker

    async def _call(self, call: str, **args: Any) -> Any:
        reply = await self._peers.request(self.worker, "POST", WORKER_PATH, json={"call": call, "args": args})
        if not reply.ok:
            error = reply.body.get("error") if isinstance(reply.body, dict) else None
            raise ConsoleError(str(error or f"worker {self.worker} answered {reply.status}"), 502)
        return reply.body["result"]

    async def state(self) -> dict[str, list[dict[str, Any]]]:
        state = await self._call("state")
        if not isinstance(state, dict):
            raise ConsoleError(f"worker {self.worker} answered state with a {type(state).__name__}, not an object", 502)
        for entries in state.values():
            for entry in entries:
                entry["worker"] = worker_number(self.worker)
                if instance_of(self.worker):
                    entry["instance"] = instance_of(self.worker)
        return state

    async def refresh(self) -> None:
        await self._call("refresh")

    async def unpair(self, pairing_id: str) -> int:
        return int(await self._call("unpair", pairing_id=pairing_id))


class FanOutPairing:
    """Every worker's companions as one; `backends` is asked afresh each time. A worker that does
    not answer (restarting) is left out with a warning: its companions register again anyway."""

    def __init__(self, backends: Callable[[], Sequence[PairingBackend]]) -> None:
        self._backends = backends

    async def _each(self, call: Callable[[PairingBackend], Awaitable[T]]) -> list[T]:
        answers = await asyncio.gather(*(call(backend) for backend in self._backends()), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            if isinstance(answer, BaseException):
                logger.warning("a worker did not answer about its companions: {}", answer)
        return [answer for answer in answers if not isinstance(answer, BaseException)]

    async def state(self) -> dict[str, list[dict[str, Any]]]:
        merged: dict[str, list[dict[str, Any]]] = {"pending": [], "companions": []}
        for state in await self._each(lambda backend: backend.state()):
            for part, entries in state.items():
                merged.setdefault(part, []).extend(entries)
        return merged

    async def refresh(self) -> None:
        await self._each(lambda backend: backend.refresh())

    async def unpair(self, pairing_id: str) -> int:
        return sum(await self._each(lambda backend: backend.unpair(pairing_id)))


class PairingApi:
    """The `/api/pairing` routes over a store (approvals) and a backend (live companions)."""

    def __init__(self, store: PairingStore, backend: PairingBackend) -> None:
        self.store = store
        self.backend = backend

    def register(self, add_route: Any, protect: Callable[[Any], Any]) -> None:
        """`protect` wraps a handler with the console API's operator guard."""
        add_route("GET", "/api/pairing", protect(self._state))
        add_route("POST", "/api/pairing/approve", protect(self._approve))
        add_route("POST", "/api/pairing/revoke", protect(self._revoke))

    async def state(self) -> dict[str, Any]:
        live = await self.backend.state()
        return {**live, "approved": [approval.to_json() for approval in self.store.approvals()]}

    async def approve(self, pairing_id: str) -> dict[str, Any]:
        live = await self.backend.state()
        entry = next((e for e in live["pending"] if e["id"] == pairing_id), None)
        if entry is None:
            known = any(a.key.id == pairing_id for a in self.store.approvals())
            raise ConsoleError(
                f"pairing {pairing_id} is approved already"
                if known
                else f"no companion is waiting for approval with pairing id {pairing_id!r} "
                "(it must be connected; GET /api/pairing lists them)",
                409 if known else 404,
            )
        approval = self.store.approve(CompanionKey(entry["companion"], entry["client_id"], entry["mac"]))
        await self.store.sync()  # stored before any process is told
        await self.backend.refresh()
        after = await self.backend.state()
        return {"approved": approval.to_json(), "companions": [e for e in after["companions"] if e["id"] == pairing_id]}

    async def revoke(self, pairing_id: str) -> dict[str, Any]:
        revoked = self.store.revoke(pairing_id)
        await self.store.sync()
        unpaired = await self.backend.unpair(pairing_id)
        if revoked is None and not unpaired:
            raise ConsoleError(f"no approval and no live companion with pairing id {pairing_id!r}", 404)
        return {"revoked": revoked.to_json() if revoked else None, "unpaired": unpaired}

    async def _state(self, request: web.Request) -> web.Response:
        return json_reply(await self.state())

    async def _approve(self, request: web.Request) -> web.Response:
        return json_reply(await self.approve(await _pairing_id(request)))

    async def _revoke(self, request: web.Request) -> web.Response:
        return json_reply(await self.revoke(await _pairing_id(request)))


async def _pairing_id(request: web.Request) -> str:
    body = await json_body(request, '{"id": PAIRING_ID}')
    pairing_id = body.get("id")
    if not isinstance(pairing_id, str) or not pairing_id.strip() or len(pairing_id) > MAX_ID_CHARS:
        raise ConsoleError(f"id must be a pairing id (a string of at most {MAX_ID_CHARS} characters)")
    return pairing_id.strip()
