"""The Redis store's facts (vixio/state/facts.py): `P facts:DEVICE`, a hash of
[person, key] (JSON) -> [kind, value, at, source] (JSON), with no expiry (like the long-term memory).

A merge (new facts and the ones they replace) is one script, so no other instance sees half of it.
A deleted field is gone from the server at once; RDB and AOF files keep it until they are next
rewritten (docs/privacy.md#redis).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from vixio.state.facts import Fact, FactKey, FactStore


class RedisFacts(FactStore):
    """`FactStore` for `RedisStore` (which supplies `_call`, `_script` and `prefix`)."""

    prefix: str
    _call: Callable[..., Awaitable[Any]]
    _script: Callable[..., Any]

    def _facts_key(self, device_id: str) -> str:
        return f"{self.prefix}facts:{device_id}"

    async def facts(self, device_id: str, person: str | None = None) -> list[Fact]:
        entries = await self._call(lambda r: r.hgetall(self._facts_key(device_id)), write=False)
        found = []
        for field, value in entries.items():
            who, key = json.loads(field)
            if person is not None and who != person:
                continue
            kind, text, at, source = json.loads(value)
            found.append(Fact(device_id, who, key, kind, text, float(at), source))
        return sorted(found, key=lambda f: (f.at, f.person, f.key))

    async def put_facts(self, device_id: str, facts: Sequence[Fact], drop: Sequence[FactKey] = ()) -> None:
        if not facts and not drop:
            return
        args: list[Any] = [device_id, repr(time.time()), len(drop), *(_field(person, key) for person, key in drop)]
        for fact in facts:
            args += [
                _field(fact.person, fact.key),
                json.dumps([fact.kind, fact.value, fact.at, fact.source], ensure_ascii=False),
            ]
        await self._call(
            self._script("PUT_FACTS", [self._facts_key(device_id), self.prefix + "devices"], args), write=True
        )

    async def delete_facts(self, device_id: str, keys: Sequence[FactKey]) -> int:
        if not keys:
            return 0
        fields = [_field(person, key) for person, key in keys]
        return int(await self._call(lambda r: r.hdel(self._facts_key(device_id), *fields), write=True))

    async def forget_facts(self, device_id: str, person: str | None = None) -> int:
        prefix = "" if person is None else json.dumps([person], ensure_ascii=False)[:-1] + ", "
        return int(
            await self._call(self._script("FORGET_PERSON_FACTS", [self._facts_key(device_id)], [prefix]), write=True)
        )


def _field(person: str, key: str) -> str:
    return json.dumps([person, key], ensure_ascii=False)
