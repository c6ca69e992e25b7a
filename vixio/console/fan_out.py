"""FanOutBackend: several console backends as one (one per worker process).

Lists are merged, device-wide news (reassign, memory_changed) goes to every backend; a
session-scoped call (detail, tools, execute, say) goes to the backend that
holds the session. The backends are asked for afresh each time, so workers may come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from loguru import logger

from vixio.console.backend import ConsoleBackend, ConsoleError


class FanOutBackend:
    """Several backends as one (e.g. one per worker process): lists are merged, a session-scoped
    call goes to the backend that holds the session.

    `backends` is called for the current list each time, so workers may come and go. Process-wide
    tools are the same in every worker; the first backend answers for them.
    """

    def __init__(self, backends: Callable[[], Sequence[ConsoleBackend]]) -> None:
        self._backends = backends

    async def sessions(self) -> list[dict[str, Any]]:
        answers = await asyncio.gather(*(backend.sessions() for backend in self._backends()), return_exceptions=True)
        merged: list[dict[str, Any]] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                logger.warning("a console backend did not list its sessions: {}", answer)
                continue
            merged.extend(answer)
        return merged

    async def _owner(self, session_id: str) -> ConsoleBackend:
        for backend in self._backends():
            with contextlib.suppress(ConsoleError):
                if any(s["session_id"] == session_id for s in await backend.sessions()):
                    return backend
        raise ConsoleError(f"no live session {session_id!r} on this server", 404)

    def _first(self) -> ConsoleBackend:
        backends = self._backends()
        if not backends:
            raise ConsoleError("no worker is running", 503)
        return backends[0]

    async def session(self, session_id: str) -> dict[str, Any]:
        return await (await self._owner(session_id)).session(session_id)

    async def tools(self, session_id: str | None) -> dict[str, Any]:
        backend = await self._owner(session_id) if session_id else self._first()
        return await backend.tools(session_id)

    async def execute(self, session_id: str | None, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        backend = await self._owner(session_id) if session_id else self._first()
        return await backend.execute(session_id, tool, arguments)

    async def say(self, session_id: str, text: str) -> dict[str, Any]:
        return await (await self._owner(session_id)).say(session_id, text)

    async def reassign(self, device_id: str, profile: str | None) -> list[dict[str, Any]]:
        """Every backend: the device may have sessions on several workers (or none)."""
        answers = await asyncio.gather(
            *(backend.reassign(device_id, profile) for backend in self._backends()), return_exceptions=True
        )
        switched: list[dict[str, Any]] = []
        for answer in answers:
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            if isinstance(answer, BaseException):
                logger.warning("a console backend did not switch the device's sessions: {}", answer)
                continue
            switched.extend(answer)
        return switched

    async def memory_changed(self, device_id: str, what: str, conversation: str = "", seq: int = -1) -> int:
        """Every backend: a device's conversations may be live on any worker."""
        answers = await asyncio.gather(
            *(backend.memory_changed(device_id, what, conversation, seq) for backend in self._backends()),
            return_exceptions=True,
        )
        followed = 0
        for answer in answers:
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                logger.warning("a console backend did not take a memory change of {}: {}", device_id, answer)
                continue
            followed += answer
        return followed
