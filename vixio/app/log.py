"""Logging with loguru: one line per event, bound with session and device id.

log = logger.bind(session=session_id, device=device_id)
log.info("hello answered in {:.1f} ms", ms)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from loguru import logger

if TYPE_CHECKING:
    from loguru import Record

_LINE = (
    "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {extra[session]} | {extra[device]} | {extra[component]} | {message}"
)


def setup_logging(level: str = "INFO", *, tracebacks: bool = False, process: str = "") -> None:
    """Send vixio's log to stderr at `level`; a `process` name (e.g. "w1" for a worker, letters and
    digits) follows the level on every line.

    Without `tracebacks` an exception stays on its event's line as `[Type: message]`, so a log
    is one line per event and greps cleanly; with it the full traceback follows.
    """
    logger.enable("vixio")  # importing vixio leaves its log off (a library prints nothing unasked)
    logger.remove()
    logger.configure(extra={"session": "-", "device": "-", "component": "-"}, patcher=_patch)

    head = _LINE.replace("{extra[session]}", f"{process} | {{extra[session]}}", 1) if process else _LINE

    def line(record: Record) -> str:
        suffix = "\n{exception}" if tracebacks and record["exception"] else ""
        return head + "{extra[exc]}" + suffix + "\n"

    logger.add(sys.stderr, level=level.upper(), format=line, backtrace=False, diagnose=False)


def _patch(record: Record) -> None:
    extra = record["extra"]
    if extra.get("component", "-") == "-":
        extra["component"] = extra.get("station") or record["name"] or "-"
    exception = record["exception"]
    extra["exc"] = f" [{exception.type.__name__}: {exception.value}]" if exception and exception.type else ""
