"""The Redis store's reminders, fired occurrences and `notify` clips (`ReminderStore`).

Keys (P is `state.prefix`; vixio/state/redis.py lists the others):

    P reminders:DEVICE          hash  reminder id -> reminder json
    P reminder-due              zset  "ID|DEVICE" scored by when it fires next (every device's)
    P fired:DEVICE              hash  occurrence -> fired json (waiting for delivery, at most `keep`)
    P fired-claims:DEVICE       hash  occurrence -> unix time its delivery's claim lapses
    P clip:TOKEN                string base64 of a notify clip, expiring with it
    P clips                     zset  tokens by expiry (bounds their number)

The claim (`fire_reminder`) is one script: it checks that the reminder's score is still the due
time the caller read, moves or removes it and records the occurrence, so of several instances
that read the same due reminder exactly one wins.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from vixio.state.reminders import FiredReminder, Reminder

if TYPE_CHECKING:
    from vixio.state.redis_link import Op, RedisLink

PUT_REMINDER = """
-- KEYS: the device's reminders (hash), reminder-due (zset); ARGV: id, json, due, per device, member
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
return 1
"""

CANCEL_REMINDER = """
-- KEYS: the device's reminders, reminder-due; ARGV: id, member
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return removed
"""

DUE_REMINDERS = """
-- KEYS: reminder-due; ARGV: prefix, max score ('+inf' for all), limit
-- Returns the reminders' json, the soonest first; members whose reminder is gone leave the zset.
local out = {}
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(members) do
  local bar = string.find(member, '|', 1, true)
  local value = redis.call('HGET', ARGV[1] .. 'reminders:' .. string.sub(member, bar + 1), string.sub(member, 1, bar - 1))
  if value then
    table.insert(out, value)
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
return out
"""

FIRE_REMINDER = """
-- KEYS: the device's reminders, reminder-due, the device's fired (hash)
-- ARGV: member, due read, next due ('' none), moved json, id, occurrence, fired json, keep
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[5])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[5], ARGV[4])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
while redis.call('HLEN', KEYS[3]) > tonumber(ARGV[8]) do
  local oldest, oldest_due = nil, nil
  local all = redis.call('HGETALL', KEYS[3])
  for i = 1, #all, 2 do
    local due = cjson.decode(all[i + 1]).due
    if oldest_due == nil or due < oldest_due then
      oldest, oldest_due = all[i], due
    end
  end
  redis.call('HDEL', KEYS[3], oldest)
end
return 1
"""

TAKE_FIRED = """
-- KEYS: the device's fired, its claims; ARGV: occurrence ('' for all)
if ARGV[1] == '' then
  local all = redis.call('HVALS', KEYS[1])
  redis.call('DEL', KEYS[1], KEYS[2])
  return all
end
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then return {} end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {value}
"""

CLAIM_FIRED = """
-- KEYS: the device's fired, its claims; ARGV: now, until, occurrence ('' for all), limit
-- Returns the claimed ones' json (the caller sorts them); claims of occurrences gone are dropped.
local out = {}
local all = redis.call('HGETALL', KEYS[1])
local free = {}
for i = 1, #all, 2 do
  if ARGV[3] == '' or all[i] == ARGV[3] then
    local claim = redis.call('HGET', KEYS[2], all[i])
    if not claim or tonumber(claim) <= tonumber(ARGV[1]) then
      table.insert(free, {cjson.decode(all[i + 1]).due, all[i], all[i + 1]})
    end
  end
end
table.sort(free, function(a, b) if a[1] == b[1] then return a[2] < b[2] end return a[1] < b[1] end)
for i = 1, math.min(#free, tonumber(ARGV[4])) do
  redis.call('HSET', KEYS[2], free[i][2], ARGV[2])
  table.insert(out, free[i][3])
end
for _, occurrence in ipairs(redis.call('HKEYS', KEYS[2])) do
  if redis.call('HEXISTS', KEYS[1], occurrence) == 0 then redis.call('HDEL', KEYS[2], occurrence) end
end
return out
"""

SETTLE_FIRED = """
-- KEYS: the device's fired, its claims; ARGV: '1' delivered (removed) or '0' (claim dropped), occurrences...
for i = 2, #ARGV do
  if ARGV[1] == '1' then redis.call('HDEL', KEYS[1], ARGV[i]) end
  redis.call('HDEL', KEYS[2], ARGV[i])
end
"""

PUT_CLIP = """
-- KEYS: the clip, clips (zset); ARGV: base64 data, until ms, keep, token, now ms, clip key prefix
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if extra > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
  for _, token in ipairs(old) do redis.call('DEL', ARGV[6] .. token) end
end
"""


class RedisReminders:
    """`ReminderStore` on Redis (see the module docstring for keys)."""

    if TYPE_CHECKING:  # RedisStore's
        prefix: str
        _link: RedisLink

        async def _call(self, op: Op, *, write: bool) -> Any: ...

    def _lua(self, source: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Op:
        return self._link.script(source, keys, args)

    def _reminder_keys(self, device_id: str) -> list[str]:
        return [f"{self.prefix}reminders:{device_id}", self.prefix + "reminder-due"]

    async def put_reminder(self, reminder: Reminder, per_device: int) -> bool:
        member = f"{reminder.id}|{reminder.device_id}"
        return bool(
            await self._call(
                self._lua(
                    PUT_REMINDER,
                    self._reminder_keys(reminder.device_id),
                    [reminder.id, _dumps(asdict(reminder)), repr(reminder.due), per_device, member],
                ),
                write=True,
            )
        )

    async def reminders(self, device_id: str | None = None, limit: int = 1000) -> list[Reminder]:
        if device_id is not None:
            values = await self._call(lambda r: r.hvals(f"{self.prefix}reminders:{device_id}"), write=False)
            found = sorted((Reminder(**json.loads(value)) for value in values), key=lambda x: (x.due, x.id))
            return found[:limit]
        return await self._due("+inf", limit)

    async def cancel_reminder(self, device_id: str, reminder_id: str) -> bool:
        return bool(
            await self._call(
                self._lua(CANCEL_REMINDER, self._reminder_keys(device_id), [reminder_id, f"{reminder_id}|{device_id}"]),
                write=True,
            )
        )

    async def next_reminder_due(self) -> float | None:
        first = await self._call(lambda r: r.zrange(self.prefix + "reminder-due", 0, 0, withscores=True), write=False)
        return float(first[0][1]) if first else None

    async def due_reminders(self, now: float, limit: int) -> list[Reminder]:
        return await self._due(repr(now), limit)

    async def _due(self, until: str, limit: int) -> list[Reminder]:
        values = await self._call(
            self._lua(DUE_REMINDERS, [self.prefix + "reminder-due"], [self.prefix, until, max(0, limit)]), write=True
        )
        return [Reminder(**json.loads(value)) for value in values]

    async def fire_reminder(self, reminder: Reminder, next_due: float | None, keep: int) -> bool:
        fired = reminder.fired()
        moved = "" if next_due is None else _dumps(asdict(reminder.moved_to(next_due)))
        keys = [*self._reminder_keys(reminder.device_id), f"{self.prefix}fired:{reminder.device_id}"]
        return bool(
            await self._call(
                self._lua(
                    FIRE_REMINDER,
                    keys,
                    [
                        f"{reminder.id}|{reminder.device_id}",
                        repr(reminder.due),
                        "" if next_due is None else repr(next_due),
                        moved,
                        reminder.id,
                        fired.occurrence,
                        _dumps(asdict(fired)),
                        max(1, keep),
                    ],
                ),
                write=True,
            )
        )

    def _fired_keys(self, device_id: str) -> list[str]:
        return [f"{self.prefix}fired:{device_id}", f"{self.prefix}fired-claims:{device_id}"]

    async def claim_fired(
        self, device_id: str, now: float, until: float, occurrence: str | None = None, limit: int = 16
    ) -> list[FiredReminder]:
        values = await self._call(
            self._lua(
                CLAIM_FIRED, self._fired_keys(device_id), [repr(now), repr(until), occurrence or "", max(1, limit)]
            ),
            write=True,
        )
        return sorted((FiredReminder(**json.loads(value)) for value in values), key=lambda f: (f.due, f.occurrence))

    async def settle_fired(self, device_id: str, occurrences: Sequence[str], delivered: bool) -> None:
        if occurrences:
            await self._call(
                self._lua(SETTLE_FIRED, self._fired_keys(device_id), ["1" if delivered else "0", *occurrences]),
                write=True,
            )

    async def take_fired(self, device_id: str, occurrence: str | None = None) -> list[FiredReminder]:
        values = await self._call(self._lua(TAKE_FIRED, self._fired_keys(device_id), [occurrence or ""]), write=True)
        fired = [FiredReminder(**json.loads(value)) for value in values]
        return sorted(fired, key=lambda f: (f.due, f.occurrence))

    async def put_clip(self, token: str, data: bytes, until: float, keep: int) -> None:
        await self._call(
            self._lua(
                PUT_CLIP,
                [f"{self.prefix}clip:{token}", self.prefix + "clips"],
                [
                    base64.b64encode(data).decode(),
                    int(until * 1000),
                    max(1, keep),
                    token,
                    int(time.time() * 1000),
                    self.prefix + "clip:",
                ],
            ),
            write=True,
        )

    async def clip(self, token: str) -> bytes | None:
        value = await self._call(lambda r: r.get(f"{self.prefix}clip:{token}"), write=False)
        return None if value is None else base64.b64decode(value)


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)
