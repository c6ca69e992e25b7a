"""The Redis store's voiceprint calls (vixio/state/voiceprints.py).

P voiceprints:DEVICE   hash  person -> [base64 float32 vector, samples, at]
P voiceprint-devices   set   devices holding any (so `voiceprints()` can list them all)
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import TYPE_CHECKING, Any

from vixio.state.voiceprints import Voiceprint


class RedisVoiceprints:
    """Mixed into `RedisStore` (which provides `_call` and `prefix`)."""

    prefix: str

    if TYPE_CHECKING:  # RedisStore's

        async def _call(self, op: Any, *, write: bool) -> Any: ...

    async def put_voiceprint(self, device_id: str, person: str, vector: bytes, samples: int) -> None:
        value = json.dumps([base64.b64encode(vector).decode(), samples, time.time()])
        key, devices = self.prefix + "voiceprints:" + device_id, self.prefix + "voiceprint-devices"

        # One command a call (the link pipelines calls made together): both go in one round trip.
        await asyncio.gather(
            self._call(lambda r: r.hset(key, person, value), write=True),
            self._call(lambda r: r.sadd(devices, device_id), write=True),
        )

    async def voiceprints(self, device_id: str | None = None) -> list[Voiceprint]:
        if device_id is None:
            devices = sorted(await self._call(lambda r: r.smembers(self.prefix + "voiceprint-devices"), write=False))
        else:
            devices = [device_id]
        found = []
        for device in devices:
            entries = await self._call(lambda r, d=device: r.hgetall(self.prefix + "voiceprints:" + d), write=False)
            for person, value in sorted(entries.items()):
                vector, samples, at = json.loads(value)
                found.append(Voiceprint(device, person, base64.b64decode(vector), int(samples), float(at)))
        return found

    async def delete_voiceprint(self, device_id: str, person: str) -> bool:
        return bool(await self._call(lambda r: r.hdel(self.prefix + "voiceprints:" + device_id, person), write=True))

    async def clear_voiceprints(self, device_id: str) -> int:
        key = self.prefix + "voiceprints:" + device_id

        count, _, _ = await asyncio.gather(
            self._call(lambda r: r.hlen(key), write=False),
            self._call(lambda r: r.delete(key), write=True),
            self._call(lambda r: r.srem(self.prefix + "voiceprint-devices", device_id), write=True),
        )
        return int(count)
