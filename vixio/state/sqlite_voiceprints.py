"""The SQLite store's voiceprint queries (vixio/state/voiceprints.py): table `voiceprints`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from vixio.state.voiceprints import Voiceprint


class SqliteVoiceprints:
    """Mixed into `SqliteStore` (which provides `_call`)."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _call(self, work: Any, *, write: bool) -> Any: ...

    async def put_voiceprint(self, device_id: str, person: str, vector: bytes, samples: int) -> None:
        at = time.time()
        await self._call(
            lambda c: c.execute(
                "INSERT INTO voiceprints (device_id, person, vector, samples, at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (device_id, person) DO UPDATE SET vector = excluded.vector, samples = excluded.samples, "
                "at = excluded.at",
                (device_id, person, vector, samples, at),
            ),
            write=True,
        )

    async def voiceprints(self, device_id: str | None = None) -> list[Voiceprint]:
        query = "SELECT device_id, person, vector, samples, at FROM voiceprints"
        args: tuple[str, ...] = ()
        if device_id is not None:
            query, args = query + " WHERE device_id = ?", (device_id,)
        rows = await self._call(
            lambda c: c.execute(query + " ORDER BY device_id, person", args).fetchall(), write=False
        )
        return [Voiceprint(row[0], row[1], bytes(row[2]), row[3], row[4]) for row in rows]

    async def delete_voiceprint(self, device_id: str, person: str) -> bool:
        return bool(
            await self._call(
                lambda c: (
                    c.execute(
                        "DELETE FROM voiceprints WHERE device_id = ? AND person = ?", (device_id, person)
                    ).rowcount
                ),
                write=True,
            )
        )

    async def clear_voiceprints(self, device_id: str) -> int:
        return int(
            await self._call(
                lambda c: c.execute("DELETE FROM voiceprints WHERE device_id = ?", (device_id,)).rowcount, write=True
            )
        )
