"""The console's re-binds: a pinned device id asked for by another Client-Id, and the operator's answer.

    GET  /api/identities                {"rebinds": [...]}: pending re-binds, the most recent first,
                                        each with the Client-Id the device is pinned to now
    POST /api/identities/approve        {"device_id": D, "client_id": C} → D is pinned to C (its
                                        memory and history go with it); D's other requests go
    POST /api/identities/dismiss        {"device_id": D, "client_id": C} → that request is dropped

A device id is pinned to the Client-Id it was first seen with (vixio/transports/xiaozhi/session/identity.py);
a contact with another Client-Id is served as another device and asks here. A re-flashed board
has a new Client-Id: approving its request makes it the device again. Only a pending request
can be approved (a typo pins nothing). It reads and writes the state store itself, so every
worker and instance sees the new pin at the device's next contact. Operators only, like the
rest of `/api/`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from aiohttp import web
from loguru import logger

from vixio.console.backend import ConsoleError
from vixio.console.replies import json_body, json_reply
from vixio.state.store import RebindRequest, Store, StoreError

T = TypeVar("T")

MAX_DEVICE_ID = 128
MAX_CLIENT_ID = 128
_EXAMPLE = '{"device_id": "aa:bb:cc:dd:ee:ff", "client_id": "<its new Client-Id>"}'


class IdentityApi:
    """The `/api/identities` routes over the state store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def register(self, add_route: Any, protect: Any) -> None:
        """`protect` wraps a handler with the console API's operator guard."""
        add_route("GET", "/api/identities", protect(self._state))
        add_route("POST", "/api/identities/approve", protect(self._approve))
        add_route("POST", "/api/identities/dismiss", protect(self._dismiss))

    async def state(self) -> dict[str, Any]:
        requests = await _store(self.store.rebind_requests())
        pins: dict[str, str | None] = {}
        for request in requests:
            if request.device_id not in pins:
                pin = await _store(self.store.identity_pin(request.device_id))
                pins[request.device_id] = None if pin is None else pin.client_id
        return {"rebinds": [_entry(r, pins[r.device_id]) for r in requests]}

    async def approve(self, device_id: str, client_id: str) -> dict[str, Any]:
        await self._pending(device_id, client_id)
        before = await _store(self.store.identity_pin(device_id))
        await _store(self.store.repin_identity(device_id, client_id))
        logger.bind(device=device_id).info(
            "console: {} re-bound by an operator to Client-Id {!r} (was {!r})",
            device_id,
            client_id,
            None if before is None else before.client_id,
        )
        return {
            "device_id": device_id,
            "client_id": client_id,
            "previous_client_id": None if before is None else before.client_id,
        }

    async def dismiss(self, device_id: str, client_id: str) -> dict[str, Any]:
        if not await _store(self.store.dismiss_rebind(device_id, client_id)):
            raise ConsoleError(f"no re-bind of {device_id} to Client-Id {client_id!r} is pending", 404)
        logger.bind(device=device_id).info(
            "console: the re-bind of {} to Client-Id {!r} was dismissed", device_id, client_id
        )
        return {"device_id": device_id, "client_id": client_id, "dismissed": True}

    async def _pending(self, device_id: str, client_id: str) -> RebindRequest:
        for request in await _store(self.store.rebind_requests(device_id)):
            if request.client_id == client_id:
                return request
        raise ConsoleError(
            f"no re-bind of {device_id} to Client-Id {client_id!r} is pending (the board asks by "
            "connecting; GET /api/identities lists the requests)",
            404,
        )

    async def _state(self, request: web.Request) -> web.Response:
        return json_reply(await self.state())

    async def _approve(self, request: web.Request) -> web.Response:
        return json_reply(await self.approve(*await _pair(request)))

    async def _dismiss(self, request: web.Request) -> web.Response:
        return json_reply(await self.dismiss(*await _pair(request)))


def _entry(request: RebindRequest, pinned: str | None) -> dict[str, Any]:
    return {
        "device_id": request.device_id,
        "client_id": request.client_id,
        "pinned_client_id": pinned,
        "first": request.first,
        "last": request.last,
        "attempts": request.attempts,
    }


async def _pair(request: web.Request) -> tuple[str, str]:
    body = await json_body(request, _EXAMPLE)
    device_id, client_id = body.get("device_id"), body.get("client_id")
    if not isinstance(device_id, str) or not 0 < len(device_id.strip()) <= MAX_DEVICE_ID:
        raise ConsoleError(f"device_id must be a device id of 1 to {MAX_DEVICE_ID} characters ({_EXAMPLE})")
    if not isinstance(client_id, str) or len(client_id) > MAX_CLIENT_ID:
        raise ConsoleError(f"client_id must be a Client-Id of at most {MAX_CLIENT_ID} characters ({_EXAMPLE})")
    return device_id.strip().lower(), client_id.strip()


async def _store(call: Awaitable[T]) -> T:
    try:
        return await call
    except StoreError as exc:
        raise ConsoleError(f"the state store cannot be used: {exc}", 503) from None
