"""The console's Memory pane: each device's long-term memory and stored history, seen and edited.

    GET  /api/devices[?limit=50&offset=0]          devices with stored turns or memory, newest first
    GET  /api/devices/{device}[?turns=50]          its memory and latest turns (newest last)
    POST /api/devices/{device}/memory              {"text": ...} replaces the memory ("" clears it)
    POST /api/devices/{device}/turns/delete        {"conversation": ..., "seq": n} deletes one turn
    POST /api/devices/{device}/history/clear       deletes every turn
    POST /api/devices/{device}/forget              all of it, as `vixio memory clear` (docs/privacy.md)
    POST /api/devices/{device}/facts/{delete,edit,add}   one fact (vixio/console/memory_facts.py)

`GET /api/devices` lists the connected devices too, with nothing stored yet (zeros), so an
operator finds a device that just connected. Its detail lists the facts, identity first.

It reads and writes the state store itself, so devices that are not connected are there too and
every worker sees the change (the store is shared). Then the device's live sessions, on whichever
worker, are told (`ConsoleBackend.memory_changed`): an edited memory is in the instructions from
their next turn, a deleted turn or cleared history leaves the model's history at once. Operators
only, like the rest of `/api/`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from loguru import logger

from vixio.config.memory import MemoryConfig
from vixio.console.backend import ConsoleBackend, ConsoleError
from vixio.console.memory_facts import FactRoutes, fact_json
from vixio.console.replies import checked_device_id as _checked_device_id
from vixio.console.replies import json_body as _body
from vixio.console.replies import json_reply as _json
from vixio.state.fact_merge import rank
from vixio.state.store import Store, StoredTurn, StoreError

DEVICE_PAGE, MAX_DEVICE_PAGE = 50, 200
TURN_PAGE, MAX_TURN_PAGE = 50, 500
MAX_CONVERSATION_ID = 64


class MemoryApi:
    """The Memory pane's routes over the state store and the live sessions' backend."""

    def __init__(self, store: Store, config: MemoryConfig, backend: Callable[[], ConsoleBackend]) -> None:
        self.store = store
        self.config = config
        self._backend = backend
        """The console's current backend (one process, or every worker)."""

    def register(self, add_route: Any, protect: Any) -> None:
        for method, path, handler in (
            ("GET", "/api/devices", self._devices),
            ("GET", "/api/devices/{device_id}", self._device),
            ("POST", "/api/devices/{device_id}/memory", self._set_memory),
            ("POST", "/api/devices/{device_id}/turns/delete", self._delete_turn),
            ("POST", "/api/devices/{device_id}/history/clear", self._clear_history),
            ("POST", "/api/devices/{device_id}/forget", self._forget),
            *FactRoutes(self.store, self._changed, self._write, _device_id).routes(),
        ):
            add_route(method, path, protect(handler))

    # --- reading -------------------------------------------------------------------------------

    async def _devices(self, request: web.Request) -> web.Response:
        limit = _count(request, "limit", DEVICE_PAGE, MAX_DEVICE_PAGE)
        offset = _count(request, "offset", 0, 10**9)
        records = await self._read(self.store.devices(limit + 1, offset))
        live = await self._live()
        rows = [
            {
                "device_id": r.device_id,
                "turns": r.turns,
                "last_turn": r.last_turn,
                "memory_chars": r.memory_chars,
                "facts": r.facts,
                "updated": r.updated,
                "live": live.get(r.device_id, []),
            }
            for r in records[:limit]
        ]
        if offset == 0:  # connected, nothing stored yet: listed first, so the operator finds them
            known = {r.device_id for r in records}
            rows[:0] = [
                {
                    "device_id": device,
                    "turns": 0,
                    "last_turn": None,
                    "memory_chars": 0,
                    "facts": 0,
                    "updated": None,
                    "live": sessions,
                }
                for device, sessions in sorted(live.items())
                if device not in known
            ]
        return _json(
            {
                "devices": rows,
                "limit": limit,
                "offset": offset,
                "more": len(records) > limit,
                "live": [{"device_id": device, "sessions": sessions} for device, sessions in sorted(live.items())],
                **self._settings(),
            }
        )

    async def _device(self, request: web.Request) -> web.Response:
        device_id = _device_id(request)
        limit = _count(request, "turns", TURN_PAGE, MAX_TURN_PAGE)
        memory = await self._read(self.store.memory(device_id))
        turns = await self._read(self.store.recent_turns(device_id, limit))
        facts = await self._read(self.store.facts(device_id))
        live = await self._live()
        return _json(
            {
                "device_id": device_id,
                "memory": None if memory is None else {"text": memory.text, "at": memory.at},
                "facts": [fact_json(fact) for fact in rank(facts)],
                "turns": [_turn(t) for t in turns],
                "turn_limit": limit,
                "live": live.get(device_id, []),
                **self._settings(),
            }
        )

    def _settings(self) -> dict[str, Any]:
        return {"max_chars": self.config.max_chars, "long_term": self.config.long_term, "enabled": self.config.enabled}

    async def _live(self) -> dict[str, list[str]]:
        """Session ids of the connected devices, by device (empty when the workers do not answer)."""
        try:
            sessions = await self._backend().sessions()
        except ConsoleError:
            return {}
        live: dict[str, list[str]] = {}
        for session in sessions:
            live.setdefault(str(session.get("device_id") or ""), []).append(str(session["session_id"]))
        live.pop("", None)
        return live

    # --- editing -------------------------------------------------------------------------------

    async def _set_memory(self, request: web.Request) -> web.Response:
        device_id = _device_id(request)
        text = (await _body(request)).get("text")
        if not isinstance(text, str):
            raise ConsoleError("text must be a string (empty clears the memory)")
        text = text.strip()
        if len(text) > self.config.max_chars:
            raise ConsoleError(
                f"the memory is {len(text)} characters; at most {self.config.max_chars} (memory.max_chars)"
            )
        await self._write(self.store.set_memory(device_id, text))
        return await self._changed(device_id, "memory", {"memory": text})

    async def _delete_turn(self, request: web.Request) -> web.Response:
        device_id = _device_id(request)
        body = await _body(request)
        conversation, seq = body.get("conversation"), body.get("seq")
        if not isinstance(conversation, str) or not 0 < len(conversation) <= MAX_CONVERSATION_ID:
            raise ConsoleError(f"conversation must be a conversation id of 1 to {MAX_CONVERSATION_ID} characters")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ConsoleError("seq must be a turn's number (0 or more)")
        if not await self._write(self.store.delete_turn(device_id, conversation, seq)):
            raise ConsoleError(f"{device_id} has no turn {conversation}#{seq}", 404)
        return await self._changed(
            device_id,
            "turn",
            {"deleted": {"conversation": conversation, "seq": seq}},
            conversation=conversation,
            seq=seq,
        )

    async def _clear_history(self, request: web.Request) -> web.Response:
        device_id = _device_id(request)
        removed = await self._write(self.store.clear_history(device_id))
        return await self._changed(device_id, "history", {"turns_deleted": removed})

    async def _forget(self, request: web.Request) -> web.Response:
        device_id = _device_id(request)
        await self._write(self.store.forget_device(device_id))
        try:  # the profile assignment went with the rest: live sessions take the config's at their next turn
            await self._backend().reassign(device_id, None)
        except ConsoleError as exc:
            logger.bind(device=device_id).warning(
                "console: live sessions of {} keep their profile until they reconnect: {}", device_id, exc.message
            )
        return await self._changed(device_id, "forget", {"forgotten": True})

    async def _changed(self, device_id: str, what: str, result: dict[str, Any], **where: Any) -> web.Response:
        logger.bind(device=device_id).info("console: the stored {} of {} was changed by an operator", what, device_id)
        try:
            followed = await self._backend().memory_changed(device_id, what, **where)
        except ConsoleError as exc:
            logger.bind(device=device_id).warning(
                "console: live sessions of {} not told of the change: {}", device_id, exc.message
            )
            followed = 0
        return _json({"device_id": device_id, **result, "live_sessions_updated": followed})

    @staticmethod
    async def _read(call: Any) -> Any:
        try:
            return await call
        except StoreError as exc:
            raise ConsoleError(str(exc), 503) from None

    @staticmethod
    async def _write(call: Any) -> Any:
        try:
            return await call
        except StoreError as exc:  # StoreWriteError included: the store logged it once
            raise ConsoleError(f"not changed: {exc}", 503) from None


def _turn(turn: StoredTurn) -> dict[str, Any]:
    return {
        "conversation": turn.conversation,
        "seq": turn.seq,
        "at": turn.at,
        "user": turn.user,
        "assistant": turn.assistant,
        "interrupted": turn.interrupted,
    }


def _device_id(request: web.Request) -> str:
    return _checked_device_id(request.match_info["device_id"], "the device id in the path")


def _count(request: web.Request, name: str, default: int, most: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number from 0 to {most}") from None
    if not 0 <= value <= most:
        raise ConsoleError(f"{name} must be a whole number from 0 to {most}")
    return value
