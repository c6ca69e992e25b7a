"""The `websockets` library's log, as vixio log lines: one short line per event, never a traceback.

Load balancers and port scanners open a TCP connection to the WebSocket port and close it
without a request; `websockets` logs each as "opening handshake failed" with a 30-line
traceback. Here such a connection is one DEBUG line, a malformed request one WARNING line
naming the reason, and handshake failures are rate-limited to one line per second (with the
count of those left out). The logger is kept at INFO so the library skips its per-frame debug
formatting on every message.
"""

from __future__ import annotations

import logging
import time

from loguru import logger as vixio_logger

LOGGER_NAME = "vixio.websockets"
_HANDSHAKE_FAILED = "opening handshake failed"


class _ToVixioLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._window_start = 0.0
        self._suppressed = 0

    def emit(self, record: logging.LogRecord) -> None:
        connection = getattr(record, "websocket", None)
        remote = getattr(connection, "remote_address", None)
        where = f"{remote[0]}:{remote[1]}" if isinstance(remote, tuple) and len(remote) >= 2 else "?"
        log = vixio_logger.bind(component="websocket")
        if record.getMessage() == _HANDSHAKE_FAILED:
            reason = _reason(record)
            if "before" in reason and "request" in reason:
                log.debug("connection from {} closed before sending a request (a health check?)", where)
                return
            now = time.monotonic()
            if now - self._window_start < 1.0:
                self._suppressed += 1
                return
            extra = f" ({self._suppressed} more in the last second)" if self._suppressed else ""
            self._window_start, self._suppressed = now, 0
            log.warning("refused a connection from {}: {}{}", where, reason, extra)
            return
        # The library's INFO lines ("server listening", "connection rejected") repeat what vixio logs itself.
        level = record.levelname if record.levelname in ("WARNING", "ERROR", "CRITICAL") else "DEBUG"
        reason = f" [{_reason(record)}]" if record.exc_info else ""
        log.log(level, "{}{}", record.getMessage(), reason)


def _reason(record: logging.LogRecord) -> str:
    """The innermost cause of the record's exception, in one line."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None:
        return "unknown reason"
    while exc.__cause__ is not None and isinstance(exc.__cause__, Exception):
        exc = exc.__cause__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, EOFError):
        return "connection closed before a request was received"
    return f"{type(exc).__name__}: {text}"[:200]


def websockets_logger() -> logging.Logger:
    """The logger to pass to `websockets.asyncio.server.serve(logger=...)`."""
    log = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(handler, _ToVixioLog) for handler in log.handlers):
        log.addHandler(_ToVixioLog())
    log.setLevel(logging.INFO)
    log.propagate = False
    return log
