"""The SQLite store's conversation history and long-term memory: tables `turns` and `memories`.

A mixin of `SqliteStore`. Deleting turns or clearing the memory is an erase (`erase=True`): the WAL
is checkpointed and truncated after it, so the words leave every file at once
(vixio/state/sqlite_thread.py). `devices` lists what the console shows per device: turns, memory
and facts counted in one query.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from vixio.state.store import DeviceMemory, DeviceRecord, StoredTurn

if TYPE_CHECKING:
    from vixio.state.sqlite_thread import Work


class SqliteHistory:
    """Turns, the long-term memory and the device list for `SqliteStore` (which supplies `_call`)."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _call(self, work: Work, *, write: bool, erase: bool = False) -> Any: ...

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        values = (device_id, turn.conversation, turn.seq, turn.user, turn.assistant, int(turn.interrupted), turn.at)
        await self._call(
            lambda c: c.execute(
                "INSERT INTO turns (device_id, conversation, seq, user_text, assistant_text, interrupted, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (device_id, conversation, seq) DO UPDATE SET "
                "user_text = excluded.user_text, assistant_text = excluded.assistant_text, "
                "interrupted = excluded.interrupted, at = excluded.at",
                values,
            ),
            write=True,
        )

    async def recent_turns(self, device_id: str, limit: int) -> list[StoredTurn]:
        rows = await self._call(
            lambda c: c.execute(
                "SELECT conversation, seq, user_text, assistant_text, interrupted, at FROM turns "
                "WHERE device_id = ? ORDER BY at DESC, seq DESC LIMIT ?",
                (device_id, limit),
            ).fetchall(),
            write=False,
        )
        return [StoredTurn(row[0], row[1], row[2], row[3], bool(row[4]), row[5]) for row in reversed(rows)]

    async def clear_history(self, device_id: str) -> int:
        return int(
            await self._call(
                lambda c: c.execute("DELETE FROM turns WHERE device_id = ?", (device_id,)).rowcount,
                write=True,
                erase=True,
            )
        )

    async def delete_turn(self, device_id: str, conversation: str, seq: int) -> bool:
        return bool(
            await self._call(
                lambda c: (
                    c.execute(
                        "DELETE FROM turns WHERE device_id = ? AND conversation = ? AND seq = ?",
                        (device_id, conversation, seq),
                    ).rowcount
                ),
                write=True,
                erase=True,
            )
        )

    async def prune_history(self, before: float) -> int:
        return int(
            await self._call(
                lambda c: c.execute("DELETE FROM turns WHERE at < ?", (before,)).rowcount, write=True, erase=True
            )
        )

    async def devices(self, limit: int, offset: int = 0) -> list[DeviceRecord]:
        rows = await self._call(
            lambda c: c.execute(
                "SELECT device_id, SUM(turns), MAX(last_turn), SUM(memory_chars), MAX(updated), SUM(facts) FROM ("
                " SELECT device_id, COUNT(*) AS turns, MAX(at) AS last_turn, 0 AS memory_chars, MAX(at) AS updated,"
                " 0 AS facts"
                " FROM turns GROUP BY device_id"
                " UNION ALL SELECT device_id, 0, NULL, LENGTH(text), at, 0 FROM memories"
                " UNION ALL SELECT device_id, 0, NULL, 0, MAX(updated), COUNT(*) FROM facts GROUP BY device_id"
                ") GROUP BY device_id ORDER BY MAX(updated) DESC, device_id LIMIT ? OFFSET ?",
                (max(0, limit), max(0, offset)),
            ).fetchall(),
            write=False,
        )
        return [DeviceRecord(row[0], int(row[1]), row[2], int(row[3]), row[4], int(row[5])) for row in rows]

    # --- long-term memory ---------------------------------------------------------------------

    async def memory(self, device_id: str) -> DeviceMemory | None:
        row = await self._call(
            lambda c: c.execute("SELECT text, at FROM memories WHERE device_id = ?", (device_id,)).fetchone(),
            write=False,
        )
        return None if row is None else DeviceMemory(row[0], row[1])

    async def set_memory(self, device_id: str, text: str) -> None:
        at = time.time()
        if not text:
            await self._call(
                lambda c: c.execute("DELETE FROM memories WHERE device_id = ?", (device_id,)), write=True, erase=True
            )
            return
        await self._call(
            lambda c: c.execute(
                "INSERT INTO memories (device_id, text, at) VALUES (?, ?, ?) "
                "ON CONFLICT (device_id) DO UPDATE SET text = excluded.text, at = excluded.at",
                (device_id, text, at),
            ),
            write=True,
        )
