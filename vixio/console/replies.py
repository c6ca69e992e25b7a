"""How the console's routes read a JSON body and answer: one place, so every route refuses a bad
body with the same words and no answer is cached."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from vixio.console.backend import ConsoleError


async def json_body(request: web.Request, example: str = "") -> dict[str, Any]:
    """The request's JSON object ({} for an empty body); ConsoleError (a 400) otherwise, showing
    `example` (what the route expects) when given."""
    expected = f" ({example})" if example else ""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleError(f"body is not JSON: {exc}{expected}") from None
    if not isinstance(data, dict):
        raise ConsoleError(f"body must be a JSON object{expected}")
    return data


def json_reply(data: Any, status: int = 200) -> web.Response:
    """`data` as JSON (non-ASCII text as is), never cached."""
    return web.json_response(data, status=status, headers={"Cache-Control": "no-store"},
                             dumps=lambda value: json.dumps(value, ensure_ascii=False))
