"""Your own tools for `vixio serve`, loaded from config.yaml without writing a server script.

    tools:
      local:
        - examples/my_tools.py:take_note            # knows which device called it
        - examples/my_tools.py:read_notes
        - function: examples/my_tools.py:check_website
          async: true                               # runs in the background; the result is told later
          timeout: 20

Any function with type hints works, sync or async; its docstring is the description the model
reads, its parameters become the JSON Schema. A parameter annotated `ToolContext` is not shown to
the model: it says who called (session, device, call id) and lets the tool `say()` something.
Sync functions run on a worker thread, so blocking file I/O here does not stall the server.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import aiohttp
from pydantic import Field

from vixio.core.tools.context import ToolContext

MAX_NOTES = 200


def _notes_file(device_id: str) -> Path:
    """One JSON file of notes per device, in $VIXIO_NOTES_DIR (default ./notes)."""
    safe = "".join(c if c.isalnum() else "_" for c in device_id or "unknown")
    return Path(os.environ.get("VIXIO_NOTES_DIR", "notes")) / f"{safe}.json"


def take_note(text: Annotated[str, Field(min_length=1, max_length=500)], ctx: ToolContext) -> str:
    """Write down a short note for the user of this device (a reminder, a shopping item, an idea)."""
    path = _notes_file(ctx.device_id)
    notes = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    notes.append({"text": text, "at": time.strftime("%Y-%m-%d %H:%M")})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notes[-MAX_NOTES:], ensure_ascii=False, indent=1), encoding="utf-8")
    return f"noted ({len(notes)} notes on this device)"


def read_notes(ctx: ToolContext, last: Annotated[int, Field(ge=1, le=20)] = 5) -> str:
    """Read back the most recent notes written on this device, newest last."""
    path = _notes_file(ctx.device_id)
    notes = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    if not notes:
        return "there are no notes on this device"
    return "\n".join(f"{note['at']}: {note['text']}" for note in notes[-last:])


async def check_website(url: str, ctx: ToolContext) -> str:
    """Check whether a website answers, and how fast (give the full address, e.g. https://example.com)."""
    if not url.startswith(("http://", "https://")):
        url = "https://" + url
    await ctx.say("Let me check that website.")
    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=15)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
            await response.content.read(65536)  # enough to know it serves a page; never the whole body
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"{url} did not answer: {type(exc).__name__}: {exc}"
    return f"{url} answered HTTP {status} in {(time.perf_counter() - started) * 1000:.0f} ms"
