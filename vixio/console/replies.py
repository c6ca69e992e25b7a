"""How the console's routes read a JSON body and a device id, and answer: one place, so every
route refuses a bad body or id with the same words and no answer is cached.

A body is parsed by `loads_bounded` (vixio/core/json_limits.py): JSON nested deeper than
`DEFAULT_MAX_DEPTH` levels is a 400 naming the limit, before anything recursive reads it."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from vixio.console.backend import ConsoleError
from vixio.core.device_ids import DeviceIdError, normalize_device_id
from vixio.core.json_limits import DEFAULT_MAX_DEPTH, JsonTooDeep, loads_bounded


async def json_body(request: web.Request, example: str = "") -> dict[str, Any]:
    """The request's JSON object ({} for an empty body); ConsoleError (a 400) otherwise, showing
    `example` (what the route expects) when given."""
    expected = f" ({example})" if example else ""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = loads_bounded(raw, DEFAULT_MAX_DEPTH)
    except JsonTooDeep as exc:
        raise ConsoleError(f"body refused: {exc}{expected}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleError(f"body is not JSON: {exc}{expected}") from None
    if not isinstance(data, dict):
        raise ConsoleError(f"body must be a JSON object{expected}")
    return data


def checked_device_id(value: Any, what: str = "device") -> str:
    """`value` as a device id (stripped, lowercased) under the rule of vixio/core/device_ids.py;
    ConsoleError (a 400) naming `what` otherwise."""
    try:
        return normalize_device_id(value, what)
    except DeviceIdError as exc:
        raise ConsoleError(str(exc)) from None


def json_reply(data: Any, status: int = 200) -> web.Response:
    """`data` as JSON (non-ASCII text as is), never cached."""
    return web.json_response(
        data,
        status=status,
        headers={"Cache-Control": "no-store"},
        dumps=lambda value: json.dumps(value, ensure_ascii=False),
    )
