"""The Redis store's conversation history and long-term memory.

Keys (P is `state.prefix`; vixio/state/redis.py lists the others):

    P turns:DEVICE               zset  "SEQ|CONVERSATION" scored by the turn's start time
    P turn-text:DEVICE           hash  "SEQ|CONVERSATION" -> [conversation, seq, user, assistant, interrupted, at]
    P memories                   hash  device -> [text, at]
    P devices                    zset  device scored by its newest turn or memory update

A mixin of `RedisStore`. A device keeps its newest `state.max_turns` turns; its two turn keys
expire `memory.history_days` after its newest turn (the hourly prune also drops older turns of
devices still talking). A turn is one script call, so the two keys and the device list change
together. `devices` drops a device whose turns expired and memory is gone when it meets it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vixio.state.store import DeviceMemory, DeviceRecord, StoredTurn

if TYPE_CHECKING:
    from vixio.state.redis_link import Op


class RedisHistory:
    """Turns, the long-term memory and the device list for `RedisStore`."""

    prefix: str
    _max_turns: int
    _history_ms: int

    if TYPE_CHECKING:  # RedisStore's

        async def _call(self, op: Op, *, write: bool) -> Any: ...

        def _script(self, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Op: ...

        async def _prune(
            self, glob: str, script: str, before: float, keys_of: Callable[[str], Sequence[str]]
        ) -> int: ...

    def _turn_keys(self, device_id: str) -> tuple[str, str]:
        return f"{self.prefix}turns:{device_id}", f"{self.prefix}turn-text:{device_id}"

    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        # Zero-padded seq first: turns that began at the same time come back in seq order.
        member = f"{turn.seq:010d}|{turn.conversation}"
        value = json.dumps(
            [turn.conversation, turn.seq, turn.user, turn.assistant, turn.interrupted, turn.at], ensure_ascii=False
        )
        await self._call(
            self._script(
                "PUT_TURN",
                [*self._turn_keys(device_id), self.prefix + "devices"],
                [member, repr(turn.at), value, self._max_turns, self._history_ms, device_id],
            ),
            write=True,
        )

    async def recent_turns(self, device_id: str, limit: int) -> list[StoredTurn]:
        if limit <= 0:
            return []
        values = await self._call(self._script("RECENT_TURNS", self._turn_keys(device_id), [limit]), write=False)
        turns = []
        for value in reversed(values):
            if value is None:
                continue
            conversation, seq, user, assistant, interrupted, at = json.loads(value)
            turns.append(StoredTurn(conversation, seq, user, assistant, bool(interrupted), at))
        return turns

    async def clear_history(self, device_id: str) -> int:
        return int(await self._call(self._script("CLEAR_TURNS", self._turn_keys(device_id)), write=True))

    async def delete_turn(self, device_id: str, conversation: str, seq: int) -> bool:
        member = f"{seq:010d}|{conversation}"
        return bool(await self._call(self._script("DELETE_TURN", self._turn_keys(device_id), [member]), write=True))

    async def prune_history(self, before: float) -> int:
        """Walks every device's turn keys (SCAN, one round trip per batch) and trims each batch in one script."""
        return await self._prune(
            "turns:*",
            "PRUNE_TURNS",
            before,
            lambda order: (order, self.prefix + "turn-text:" + order[len(self.prefix) + 6 :]),
        )

    async def devices(self, limit: int, offset: int = 0) -> list[DeviceRecord]:
        if limit <= 0:
            return []
        flat = await self._call(
            self._script(
                "DEVICES", [self.prefix + "devices", self.prefix + "memories"], [self.prefix, max(0, offset), limit]
            ),
            write=True,
        )
        records = []
        for i in range(0, len(flat), 6):
            device, turns, newest, memory, updated, facts = flat[i : i + 6]
            text = json.loads(memory)[0] if memory else ""
            records.append(
                DeviceRecord(
                    device, int(turns), float(newest) if newest else None, len(text), float(updated), int(facts)
                )
            )
        return records

    # --- long-term memory ---------------------------------------------------------------------

    async def memory(self, device_id: str) -> DeviceMemory | None:
        value = await self._call(lambda r: r.hget(self.prefix + "memories", device_id), write=False)
        if value is None:
            return None
        text, at = json.loads(value)
        return DeviceMemory(text, at)

    async def set_memory(self, device_id: str, text: str) -> None:
        key = self.prefix + "memories"
        if not text:
            await self._call(lambda r: r.hdel(key, device_id), write=True)
            return
        at = time.time()
        value = json.dumps([text, at], ensure_ascii=False)
        await self._call(
            self._script("SET_MEMORY", [key, self.prefix + "devices"], [device_id, value, repr(at)]), write=True
        )
