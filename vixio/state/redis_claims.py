"""The Redis store's named claims (`ClaimStore`): `P claim:NAME`, a string holding the holder,
expiring with the claim; taking and renewing is one script, so of several instances exactly one
gets a free claim."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vixio.state.redis_link import Op, RedisLink

CLAIM = """
-- KEYS: the claim; ARGV: holder, ttl ms
local current = redis.call('GET', KEYS[1])
if not current or current == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return current
"""

RELEASE = """
-- KEYS: the claim; ARGV: holder
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisClaims:
    """`ClaimStore` on Redis."""

    if TYPE_CHECKING:  # RedisStore's
        prefix: str
        _link: RedisLink

        async def _call(self, op: Op, *, write: bool) -> Any: ...

    async def claim(self, name: str, holder: str, ttl: float) -> str:
        op = self._link.script(CLAIM, [f"{self.prefix}claim:{name}"], [holder, max(1, int(ttl * 1000))])
        value = await self._call(op, write=True)
        return value.decode() if isinstance(value, bytes) else str(value)

    async def release(self, name: str, holder: str) -> bool:
        op = self._link.script(RELEASE, [f"{self.prefix}claim:{name}"], [holder])
        return bool(await self._call(op, write=True))
