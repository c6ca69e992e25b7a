"""The console's profiles: which assistant each device has, and assigning another at run time.

    GET  /api/profiles              {"profiles": [summary...], "devices": {id or pattern: name}}
    GET  /api/profiles/{device}     {"device", "profile", "profile_source", "assigned", "configured", "sessions"}
    POST /api/profiles/assign       {"device": ID, "profile": NAME} → kept in the state store, wins over
                                    `devices:`; the device's live sessions switch at their next turn
    POST /api/profiles/clear        {"device": ID} → the config decides again (live sessions too)

The assignment is written here (the only process, or the supervisor of `vixio serve --workers N`);
the sessions live in the workers, so the console backend tells every worker (`reassign`,
vixio/console/worker_calls.py). Operator routes only (the console API's guard).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from vixio.console.backend import ConsoleBackend, ConsoleError
from vixio.console.replies import checked_device_id, json_body, json_reply
from vixio.profiles import ProfileBook
from vixio.state.store import Store, StoreError


class ProfileApi:
    """The `/api/profiles` routes over the store (assignments) and a console backend (live sessions)."""

    def __init__(self, store: Store, book: ProfileBook, backend: Callable[[], ConsoleBackend]) -> None:
        """`backend` gives the console's current backend (one process's, or every worker's)."""
        self.store = store
        self.book = book
        self._backend = backend

    def register(self, add_route: Any, protect: Callable[[Any], Any]) -> None:
        """`protect` wraps a handler with the console API's operator guard."""
        add_route("GET", "/api/profiles", protect(self._list))
        add_route("GET", "/api/profiles/{device}", protect(self._device))
        add_route("POST", "/api/profiles/assign", protect(self._assign))
        add_route("POST", "/api/profiles/clear", protect(self._clear))

    def profiles(self) -> dict[str, Any]:
        return {
            "profiles": [self.book.summary(name) for name in self.book.names],
            "devices": dict(self.book.config.devices),
        }

    async def device(self, device_id: str) -> dict[str, Any]:
        """What the device has now, its assignment and what `devices:` alone would give it."""
        assigned = await self._read(device_id)
        choice = self.book.choose(device_id, assigned)
        sessions = [s for s in await self._backend().sessions() if s.get("device_id") == device_id]
        return {
            "device": device_id,
            **choice.to_json(),
            "assigned": assigned,
            "configured": self.book.configured(device_id).name,
            "sessions": [
                {
                    key: s.get(key)
                    for key in ("session_id", "profile", "profile_source", "profile_pending", "worker")
                    if key in s
                }
                for s in sessions
            ],
        }

    async def assign(self, device_id: str, profile: str | None) -> dict[str, Any]:
        """Assign `profile` (None: clear) and switch the device's live sessions at their next turn."""
        if profile is not None and not self.book.known(profile):
            raise ConsoleError(f"no profile {profile!r} (profiles: {', '.join(self.book.names)})", 404)
        try:
            await self.store.assign_profile(device_id, profile)
        except StoreError as exc:
            raise ConsoleError(f"the assignment was not stored: {exc}", 503) from None
        choice = self.book.choose(device_id, profile)
        sessions = await self._backend().reassign(device_id, profile)
        return {"device": device_id, **choice.to_json(), "assigned": profile, "sessions": sessions}

    async def _read(self, device_id: str) -> str | None:
        try:
            return await self.store.assigned_profile(device_id)
        except StoreError as exc:
            raise ConsoleError(f"the state store could not be read: {exc}", 503) from None

    async def _list(self, request: web.Request) -> web.Response:
        return json_reply(self.profiles())

    async def _device(self, request: web.Request) -> web.Response:
        device = checked_device_id(request.match_info["device"], "the device id in the path")
        return json_reply(await self.device(device))

    async def _assign(self, request: web.Request) -> web.Response:
        body = await json_body(request, '{"device": ID, "profile": NAME}')
        profile = body.get("profile")
        if profile is not None and (not isinstance(profile, str) or not profile.strip()):
            raise ConsoleError("profile must be a profile's name, or null to clear the assignment")
        return json_reply(
            await self.assign(checked_device_id(body.get("device")), profile.strip() if profile else None)
        )

    async def _clear(self, request: web.Request) -> web.Response:
        body = await json_body(request, '{"device": ID, "profile": NAME}')
        return json_reply(await self.assign(checked_device_id(body.get("device")), None))
