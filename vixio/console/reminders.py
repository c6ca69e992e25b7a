"""The console's reminders and operator messages: list, add and cancel a device's reminders, and
say something to a device that is not in a conversation.

    GET  /api/reminders[?device=D]      {"reminders": [...]}: the soonest first (of D, or of all)
    POST /api/reminders/add             {"device_id": D, "text": T, "at": "2026-12-01T07:00" |
                                         "in_seconds": 600 | "repeat": "weekdays", "time_of_day": "06:30",
                                         "kind": "reminder"|"alarm"|"timer"} → the reminder
    POST /api/reminders/cancel          {"device_id": D, "id": I} → {"cancelled": true}
    POST /api/say                       {"device": D, "text": T} (no "session"): an operator message,
                                         delivered as a reminder due now (docs/reminders.md)

They read and write the state store, so every worker and instance sees them; `wake` tells this
instance's schedulers to look at once (another instance's look within `reminders.check_seconds`).
Times are the config's zone (`agent.timezone`, else the server's). Operators only, like the rest of `/api/`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from loguru import logger

from vixio.config.reminders import RemindersConfig
from vixio.console.backend import ConsoleError
from vixio.console.replies import checked_device_id, json_body, json_reply
from vixio.state.reminder_tools import build_reminder, describe_time
from vixio.state.reminders import Reminder
from vixio.state.store import Store, StoreError

MAX_LISTED = 1000
_EXAMPLE = '{"device_id": "aa:bb:cc:dd:ee:ff", "text": "take your medicine", "in_seconds": 600}'


def reminder_json(reminder: Reminder) -> dict[str, Any]:
    return {
        "id": reminder.id,
        "device_id": reminder.device_id,
        "text": reminder.text,
        "kind": reminder.kind,
        "due": reminder.due,
        "when": describe_time(reminder.due, reminder.zone),
        "repeat": reminder.repeat,
        "time_of_day": reminder.at,
        "zone": reminder.zone,
        "created": reminder.created,
    }


class ReminderApi:
    """The `/api/reminders` routes and `/api/say` to a device, over the state store."""

    def __init__(self, store: Store, config: RemindersConfig, zone: str) -> None:
        self.store = store
        self.config = config
        self.zone = zone
        self.wake: Callable[[], Awaitable[Any]] | None = None
        """Tells this instance's schedulers that reminders changed (set by the app or the supervisor)."""

    def register(self, add_route: Any, protect: Any) -> None:
        add_route("GET", "/api/reminders", protect(self._list))
        add_route("POST", "/api/reminders/add", protect(self._add))
        add_route("POST", "/api/reminders/cancel", protect(self._cancel))

    async def listing(self, device_id: str | None) -> dict[str, Any]:
        found = await _store(self.store.reminders(device_id, limit=MAX_LISTED))
        return {"reminders": [reminder_json(reminder) for reminder in found]}

    async def add(self, body: dict[str, Any]) -> dict[str, Any]:
        device_id = checked_device_id(body.get("device_id"), "device_id")
        fields = {name: body.get(name) for name in ("at", "in_seconds", "repeat", "time_of_day")}
        for name, value in fields.items():
            if value is not None and not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ConsoleError(f"{name} must be a string or a number ({_EXAMPLE})")
        text, kind = body.get("text"), body.get("kind", "reminder")
        if not isinstance(text, str) or not isinstance(kind, str):
            raise ConsoleError(f"text and kind must be strings ({_EXAMPLE})")
        try:
            in_seconds = float(fields["in_seconds"]) if fields["in_seconds"] is not None else None
            reminder = build_reminder(
                device_id,
                text,
                self.config,
                self.zone,
                kind=kind,
                at=_text(fields["at"]),
                in_seconds=in_seconds,
                repeat=_text(fields["repeat"]),
                time_of_day=_text(fields["time_of_day"]),
            )
        except ValueError as exc:
            raise ConsoleError(str(exc)) from None
        await self._put(reminder)
        logger.bind(device=device_id).info(
            "console: {} {} added for {}", reminder.kind, reminder.id, describe_time(reminder.due, reminder.zone)
        )
        return reminder_json(reminder)

    async def cancel(self, device_id: str, reminder_id: str) -> dict[str, Any]:
        if not await _store(self.store.cancel_reminder(device_id, reminder_id)):
            raise ConsoleError(f"{device_id} has no reminder {reminder_id!r}", 404)
        await self._woken()
        return {"device_id": device_id, "id": reminder_id, "cancelled": True}

    async def say(self, device_id: str, text: str) -> dict[str, Any]:
        """An operator's message to a device, whether it is talking, idle or away."""
        text = " ".join(text.split()) if isinstance(text, str) else ""
        if not text or len(text) > self.config.max_text_chars:
            raise ConsoleError(f"text must be 1 to {self.config.max_text_chars} characters")
        message = Reminder.once(device_id, text, time.time(), kind="message", zone=self.zone)
        await self._put(message)
        return {"device_id": device_id, "text": text, "id": message.id, "queued": True}

    async def _put(self, reminder: Reminder) -> None:
        if not await _store(self.store.put_reminder(reminder, self.config.max_per_device)):
            raise ConsoleError(
                f"{reminder.device_id} already has {self.config.max_per_device} reminders "
                "(reminders.max_per_device); cancel one first",
                409,
            )
        await self._woken()

    async def _woken(self) -> None:
        if self.wake is not None:
            await self.wake()

    async def _list(self, request: web.Request) -> web.Response:
        device = request.query.get("device")
        return json_reply(await self.listing(checked_device_id(device) if device else None))

    async def _add(self, request: web.Request) -> web.Response:
        return json_reply(await self.add(await json_body(request, _EXAMPLE)))

    async def _cancel(self, request: web.Request) -> web.Response:
        body = await json_body(request, '{"device_id": "aa:bb:cc:dd:ee:ff", "id": "<reminder id>"}')
        reminder_id = body.get("id")
        if not isinstance(reminder_id, str) or not 0 < len(reminder_id) <= 32:
            raise ConsoleError("id must be a reminder id (GET /api/reminders lists them)")
        return json_reply(await self.cancel(checked_device_id(body.get("device_id"), "device_id"), reminder_id))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


async def _store(call: Any) -> Any:
    try:
        return await call
    except StoreError as exc:
        raise ConsoleError(f"the state store cannot be used: {exc}", 503) from None
