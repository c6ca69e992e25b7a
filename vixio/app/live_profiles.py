"""The profiles of one process's live sessions: chosen when a session starts, switched when the
device is reassigned (the console) or forgets everything (vixio/memory/forget.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from loguru import logger

from vixio.app.profile_switch import SessionProfile
from vixio.profiles.book import ProfileBook, ProfileChoice
from vixio.state.store import Store, StoreError


class LiveProfiles:
    """Live sessions' `SessionProfile`s by session id, and the choice of a new session's profile."""

    def __init__(self, book: ProfileBook, store: Store) -> None:
        self.book = book
        self.store = store
        self._sessions: dict[str, SessionProfile] = {}

    def get(self, session_id: str) -> SessionProfile | None:
        return self._sessions.get(session_id)

    def add(self, live: SessionProfile) -> None:
        self._sessions[live.session_id] = live

    def discard(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    async def choose(self, device_id: str) -> ProfileChoice:
        """The profile a device gets now: its assignment in the store (one primary-key read), else
        `devices:`, else the top-level config. A store that cannot be read leaves it to the config."""
        if not device_id:
            return self.book.configured("")
        try:
            assigned = await self.store.assigned_profile(device_id)
        except StoreError as exc:
            logger.bind(device=device_id).warning("profile assignment not read, the config decides: {}", exc)
            assigned = None
        return self.book.choose(device_id, assigned)

    def reassign(
        self, device_id: str, profile: str | None, sessions: Iterable[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        """The device's live sessions among `sessions` ((session id, device id) pairs) switch to
        `profile` (None: the one the config gives it) at their next turn; what each will run with."""
        choice = self.book.choose(device_id, profile)
        switched = []
        for session_id, holder in sessions:
            live = self._sessions.get(session_id)
            if holder == device_id and live is not None:
                live.reassign(choice)
                switched.append({"session_id": session_id, **choice.to_json()})
        return switched

    def forgotten(self, session_id: str, device_id: str) -> None:
        """The user had everything erased, the assignment with it: the config decides again."""
        live = self._sessions.get(session_id)
        if live is not None:
            live.reassign(self.book.configured(device_id))
