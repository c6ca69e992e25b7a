"""The Memory pane's facts: listed, edited, added and deleted one by one.

    POST /api/devices/{device}/facts/delete   {"person": "", "key": "like:green tea"}
    POST /api/devices/{device}/facts/edit     {"person": "", "key": ..., "value": "jasmine tea"}
    POST /api/devices/{device}/facts/add      {"kind": "like", "value": "jasmine tea", "person": ""}

(`GET /api/devices/{device}` lists them, vixio/console/memory.py.) A deleted fact goes with the
stored turns that said it (vixio/state/fact_forget.py) and leaves every store file at once; the
device's live conversations read the facts again and drop those turns from the model's history.
An edited value replaces the old one (its words erased as a deletion's are).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from vixio.console.backend import ConsoleError
from vixio.console.replies import json_body
from vixio.state.fact_forget import forget_facts
from vixio.state.fact_merge import key_of
from vixio.state.fact_rules import Finding
from vixio.state.facts import KINDS, MAX_PERSON_CHARS, MAX_VALUE_CHARS, SINGLE, Fact
from vixio.state.store import Store

MAX_KEY_CHARS = 200

Changed = Callable[..., Awaitable[web.Response]]
"""MemoryApi._changed: tells the live sessions, answers the operator."""
Write = Callable[[Any], Awaitable[Any]]
"""MemoryApi._write: a store call, a 503 when the store fails."""


def fact_json(fact: Fact) -> dict[str, Any]:
    return {
        "person": fact.person,
        "key": fact.key,
        "kind": fact.kind,
        "value": fact.value,
        "at": fact.at,
        "source": fact.source,
    }


class FactRoutes:
    """The fact routes of the Memory pane (registered by `MemoryApi`)."""

    def __init__(self, store: Store, changed: Changed, write: Write, device_id: Callable[[web.Request], str]) -> None:
        self.store = store
        self._changed = changed
        self._write = write
        self._device_id = device_id

    def routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("POST", "/api/devices/{device_id}/facts/delete", self._delete),
            ("POST", "/api/devices/{device_id}/facts/edit", self._edit),
            ("POST", "/api/devices/{device_id}/facts/add", self._add),
        ]

    async def _find(self, request: web.Request) -> tuple[str, dict[str, Any], Fact]:
        device_id = self._device_id(request)
        body = await json_body(request, '{"person": "", "key": "like:green tea"}')
        person, key = _text(body, "person", MAX_PERSON_CHARS, empty=True), _text(body, "key", MAX_KEY_CHARS)
        facts = await self._write(self.store.facts(device_id, person))
        found = next((fact for fact in facts if fact.key == key), None)
        if found is None:
            raise ConsoleError(f"{device_id} has no fact {key!r}" + (f" of {person!r}" if person else ""), 404)
        return device_id, body, found

    async def _delete(self, request: web.Request) -> web.Response:
        device_id, _, fact = await self._find(request)
        _, turns = await self._write(forget_facts(self.store, device_id, [fact]))
        return await self._tell(device_id, turns, {"deleted": fact_json(fact), "turns_deleted": len(turns)})

    async def _edit(self, request: web.Request) -> web.Response:
        device_id, body, fact = await self._find(request)
        value = _text(body, "value", MAX_VALUE_CHARS)
        keyed_by_value = fact.kind not in SINGLE and not fact.key.startswith(("date:", "like:favourite", "like:最喜欢"))
        key = key_of(Finding(fact.kind, value)) if keyed_by_value else fact.key
        edited = Fact(device_id, fact.person, key, fact.kind, value, time.time(), "operator")
        await self._write(self.store.put_facts(device_id, [edited], drop=[fact.owner] if key != fact.key else []))
        return await self._tell(device_id, [], {"fact": fact_json(edited), "replaced": fact_json(fact)})

    async def _add(self, request: web.Request) -> web.Response:
        device_id = self._device_id(request)
        body = await json_body(request, '{"kind": "like", "value": "jasmine tea", "person": ""}')
        kind = body.get("kind")
        if kind not in KINDS:
            raise ConsoleError(f"kind must be one of {', '.join(KINDS)}")
        value = _text(body, "value", MAX_VALUE_CHARS)
        person = _text(body, "person", MAX_PERSON_CHARS, empty=True)
        added = Fact(device_id, person, key_of(Finding(kind, value)), kind, value, time.time(), "operator")
        await self._write(self.store.put_facts(device_id, [added]))
        return await self._tell(device_id, [], {"fact": fact_json(added)})

    async def _tell(self, device_id: str, turns: list[Any], result: dict[str, Any]) -> web.Response:
        for turn in turns:  # the live conversations drop these turns from the model's history
            await self._changed(device_id, "turn", {}, conversation=turn.conversation, seq=turn.seq)
        return await self._changed(device_id, "facts", result)


def _text(body: dict[str, Any], name: str, most: int, *, empty: bool = False) -> str:
    value = body.get(name, "" if empty else None)
    if not isinstance(value, str) or not (0 if empty else 1) <= len(value.strip()) <= most:
        raise ConsoleError(f"{name} must be a string of {0 if empty else 1} to {most} characters")
    return " ".join(value.split())
