"""The Redis store's Lua scripts: each one is a store call that must be atomic and cost one round trip.

Keys are given in KEYS where the caller knows them; the session scripts also reach keys they
find on the way (a session's device set), which standalone Redis and Valkey allow (not Cluster).
Times are the server's clock (`TIME`) where several instances compare them, so their clocks
need not agree. Values are JSON arrays (vixio/state/redis.py documents the layout).
"""

from __future__ import annotations

PUT_TURN = """
-- KEYS: turn order (zset), turn texts (hash), devices (zset)
-- ARGV: member, at, turn json, max turns kept, history ms, device
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], 'GT', ARGV[2], ARGV[6])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if extra > 0 then
  local old = redis.call('ZRANGE', KEYS[1], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1)
  redis.call('HDEL', KEYS[2], unpack(old))
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local newest = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local until_ms = math.max(now_ms, math.floor(tonumber(newest[2]) * 1000)) + tonumber(ARGV[5])
redis.call('PEXPIREAT', KEYS[1], until_ms)
redis.call('PEXPIREAT', KEYS[2], until_ms)
"""
"""Add or replace a turn, drop the device's oldest beyond the bound, let the device's whole
history expire `memory.history_days` after its newest turn (or now, for a turn dated earlier),
and list the device among those with a history."""

DELETE_TURN = """
-- KEYS: turn order, turn texts; ARGV: member
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return removed
"""

DEVICES = """
-- KEYS: devices (zset, device -> newest update), memories (hash)
-- ARGV: prefix, offset, limit
-- Returns device, turns, newest turn's time (or ''), memory json (or ''), updated, facts, ... for
-- the page; devices whose turns expired and whose memory and facts are gone leave the list on the way.
local out = {}
local skip = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local start = 0
while want > 0 do
  local page = redis.call('ZREVRANGE', KEYS[1], start, start + 99, 'WITHSCORES')
  if #page == 0 then break end
  local gone = 0
  for i = 1, #page, 2 do
    local device = page[i]
    local order = ARGV[1] .. 'turns:' .. device
    local turns = redis.call('ZCARD', order)
    local memory = redis.call('HGET', KEYS[2], device)
    local facts = redis.call('HLEN', ARGV[1] .. 'facts:' .. device)
    if turns == 0 and not memory and facts == 0 then
      redis.call('ZREM', KEYS[1], device)
      gone = gone + 1
    elseif skip > 0 then
      skip = skip - 1
    elseif want > 0 then
      local newest = ''
      if turns > 0 then newest = redis.call('ZREVRANGE', order, 0, 0, 'WITHSCORES')[2] end
      out[#out + 1] = device
      out[#out + 1] = turns
      out[#out + 1] = newest
      out[#out + 1] = memory or ''
      out[#out + 1] = page[i + 1]
      out[#out + 1] = facts
      want = want - 1
    end
  end
  start = start + #page / 2 - gone
end
return out
"""

SET_MEMORY = """
-- KEYS: memories (hash), devices (zset); ARGV: device, memory json, at
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'GT', ARGV[3], ARGV[1])
"""
"""Replace a device's long-term memory; the device list orders it by this update if it is its newest."""

HOLD_RESULT = """
-- KEYS: the device's held results (list); ARGV: item json, until (unix s), keep
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[3]), -1)
local latest = tonumber(ARGV[2])
for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  latest = math.max(latest, tonumber(cjson.decode(item)[2]))
end
redis.call('EXPIREAT', KEYS[1], math.ceil(latest))
"""
"""The list expires with its latest result; an earlier expired one is skipped when taken."""

TAKE_RESULTS = """
-- KEYS: the device's held results; ARGV: now (unix s)
local items = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
local out = {}
for _, item in ipairs(items) do
  local held = cjson.decode(item)
  if tonumber(held[2]) > tonumber(ARGV[1]) then out[#out + 1] = held[1] end
end
return out
"""

PRUNE_RESULTS = """
-- KEYS: devices' held results; ARGV: before (unix s)
local removed = 0
for _, key in ipairs(KEYS) do
  for _, item in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if tonumber(cjson.decode(item)[2]) < tonumber(ARGV[1]) then
      removed = removed + redis.call('LREM', key, 1, item)
    end
  end
end
return removed
"""

RECENT_TURNS = """
-- KEYS: turn order, turn texts; ARGV: limit
local members = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #members == 0 then return {} end
return redis.call('HMGET', KEYS[2], unpack(members))
"""
"""The newest turns' JSON, newest first."""

CLEAR_TURNS = """
-- KEYS: turn order, turn texts
local count = redis.call('ZCARD', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
return count
"""

PRUNE_TURNS = """
-- KEYS: pairs of (turn order, turn texts); ARGV: before (unix seconds, exclusive)
local removed = 0
for i = 1, #KEYS, 2 do
  local old = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[1])
  if #old > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[1])
    for j = 1, #old, 4096 do
      redis.call('HDEL', KEYS[i + 1], unpack(old, j, math.min(j + 4095, #old)))
    end
    removed = removed + #old
  end
end
return removed
"""

SESSION_STARTED = """
-- KEYS: sessions (hash), the device's sessions (set), workers (hash)
-- ARGV: session id, session json, worker, default ttl ms, prefix, device
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local device = cjson.decode(old)[1]
  if device ~= ARGV[6] then redis.call('SREM', ARGV[5] .. 'device-sessions:' .. device, ARGV[1]) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local alive = tonumber(redis.call('HGET', KEYS[3], ARGV[3]) or '0')
if alive < now_ms then
  redis.call('HSET', KEYS[3], ARGV[3], now_ms + tonumber(ARGV[4]))
end
"""

COUNT_EVENT = """
-- KEYS: the event's counter; ARGV: window ms. INCR, and the window starts with its first event.
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return count
"""

HEARTBEAT = """
-- KEYS: workers (hash), sessions (hash); ARGV: worker, ttl ms, prefix, then session id, json, device of each
-- of the worker's live sessions. Returns the ids of the sessions that were missing (written again).
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[2]))
local again = {}
for i = 4, #ARGV, 3 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then again[#again + 1] = ARGV[i] end
  redis.call('SADD', ARGV[3] .. 'device-sessions:' .. ARGV[i + 2], ARGV[i])
end
return again
"""
"""A worker is alive; its live sessions the server lost (restarted empty, FLUSHALL) are written again."""

SESSION_ENDED = """
-- KEYS: sessions; ARGV: prefix, session id
local value = redis.call('HGET', KEYS[1], ARGV[2])
if not value then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('SREM', ARGV[1] .. 'device-sessions:' .. cjson.decode(value)[1], ARGV[2])
return 1
"""

LIVE_SESSIONS = """
-- KEYS: sessions, workers, the device's sessions (or none: every session)
-- ARGV: prefix, forget after ms (a worker silent that long has its entries deleted)
-- Returns session id, json, ... of the sessions whose worker is alive.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ids
if KEYS[3] then ids = redis.call('SMEMBERS', KEYS[3]) else ids = redis.call('HKEYS', KEYS[1]) end
local alive = {}
local out = {}
for _, id in ipairs(ids) do
  local value = redis.call('HGET', KEYS[1], id)
  if not value then
    if KEYS[3] then redis.call('SREM', KEYS[3], id) end
  else
    local session = cjson.decode(value)
    local worker = session[2]
    if alive[worker] == nil then alive[worker] = tonumber(redis.call('HGET', KEYS[2], worker) or '0') end
    if alive[worker] >= now_ms then
      out[#out + 1] = id
      out[#out + 1] = value
    elseif alive[worker] < now_ms - tonumber(ARGV[2]) then
      redis.call('HDEL', KEYS[1], id)
      redis.call('SREM', ARGV[1] .. 'device-sessions:' .. session[1], id)
    end
  end
end
return out
"""
"""Sessions whose worker's heartbeat is current. A worker silent for a day is gone for good: its
entries are deleted on the way (one silent for less is left alone: it may come back)."""

FORGET_SESSIONS = """
-- KEYS: sessions, workers; ARGV: prefix, worker names (none: every worker)
local every = #ARGV == 1
local chosen = {}
for i = 2, #ARGV do chosen[ARGV[i]] = true end
local entries = redis.call('HGETALL', KEYS[1])
local removed = 0
for i = 1, #entries, 2 do
  local session = cjson.decode(entries[i + 1])
  if every or chosen[session[2]] then
    redis.call('HDEL', KEYS[1], entries[i])
    redis.call('SREM', ARGV[1] .. 'device-sessions:' .. session[1], entries[i])
    removed = removed + 1
  end
end
if every then
  redis.call('DEL', KEYS[2])
elseif #ARGV > 1 then
  redis.call('HDEL', KEYS[2], unpack(ARGV, 2))
end
return removed
"""

PIN_IDENTITY = """
-- KEYS: pins (hash device -> [client, at]), pins seen (hash device -> seen)
-- ARGV: device, client, pin json, now, seen every (s)
-- Returns the pin json in force and its seen time.
local pin = redis.call('HGET', KEYS[1], ARGV[1])
if not pin then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
  return {ARGV[3], ARGV[4]}
end
local seen = redis.call('HGET', KEYS[2], ARGV[1]) or '0'
if cjson.decode(pin)[1] == ARGV[2] and tonumber(ARGV[4]) - tonumber(seen) >= tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
  seen = ARGV[4]
end
return {pin, seen}
"""
"""First writer wins: a device id already pinned keeps its pin; its own pair's `seen` moves on."""

_DROP_REBINDS = """
local function drop_rebinds(rebinds, order, prefix, keep)
  local kept = 0
  for _, member in ipairs(redis.call('ZREVRANGE', order, 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix then
      kept = kept + 1
      if kept > keep then
        redis.call('ZREM', order, member)
        redis.call('HDEL', rebinds, member)
      end
    end
  end
end
"""

REPIN_IDENTITY = (
    _DROP_REBINDS
    + """
-- KEYS: pins, pins seen, rebinds (hash [device, client] -> [first, last, attempts]), rebind order (zset by last)
-- ARGV: device, pin json (or '' to unpin), now, the device's rebind member prefix
drop_rebinds(KEYS[3], KEYS[4], ARGV[4], 0)
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""
)

REQUEST_REBIND = (
    _DROP_REBINDS
    + """
-- KEYS: rebinds, rebind order
-- ARGV: member ([device, client] json), now, the device's member prefix, per device, total
local now = tonumber(ARGV[2])
local old = redis.call('HGET', KEYS[1], ARGV[1])
local first, attempts = now, 1
if old then
  local entry = cjson.decode(old)
  first, attempts = entry[1], entry[3] + 1
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({first, now, attempts}))
redis.call('ZADD', KEYS[2], now, ARGV[1])
drop_rebinds(KEYS[1], KEYS[2], ARGV[3], tonumber(ARGV[4]))
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if extra > 0 then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
  redis.call('HDEL', KEYS[1], unpack(oldest))
end
"""
)
"""The device's least recent requests beyond `per device`, then everyone's beyond `total`, go."""

DISMISS_REBIND = """
-- KEYS: rebinds, rebind order; ARGV: member
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
"""

PUT_FACTS = """
-- KEYS: the device's facts (hash [person, key] json -> [kind, value, at, source] json), devices (zset)
-- ARGV: device, now, number of fields to drop, the fields to drop, then field, value pairs to set
local drop = tonumber(ARGV[3])
for i = 4, 3 + drop do redis.call('HDEL', KEYS[1], ARGV[i]) end
for i = 4 + drop, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if #ARGV >= 4 + drop then redis.call('ZADD', KEYS[2], 'GT', ARGV[2], ARGV[1]) end
"""
"""Merge facts in one step: a contradiction's old fact goes in the same call its successor lands."""

FORGET_PERSON_FACTS = """
-- KEYS: the device's facts; ARGV: the person's field prefix ('["person", '), '' for everyone's
local removed = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, 1, #ARGV[1]) == ARGV[1] then removed = removed + redis.call('HDEL', KEYS[1], field) end
end
return removed
"""
