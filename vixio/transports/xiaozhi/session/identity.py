"""Who a device is: the Client-Id its Device-Id was first seen with (docs/security.md, "Who a device is").

A Device-Id is the board's MAC: anyone on the LAN can read it and send it. The firmware also
sends a `Client-Id`, a UUID it keeps in flash across reboots and updates. The first contact
(OTA or WebSocket) pins the pair (Device-Id, Client-Id) in the state store, for every worker and
instance at once (the first writer wins). A later contact with that Device-Id and another
Client-Id is a *claimant*: a different device. It is served under an id of its own,

    claimant_device_id("aa:bb:cc:dd:ee:ff", "6f1c...")  ->  "aa:bb:cc:dd:ee:ff~3b0c44298f"

so everything keyed by a device id (memory, history, profiles, held results, the directory and
its takeover rule, companions) sees another device, with nothing to special-case downstream.
Its attempt is kept as a pending re-bind for an operator (a re-flashed board has a new
Client-Id: `vixio identity approve`, or the console), and OTA hands it no token.

Limits: trust on first contact; a device that sends no Client-Id pins "" and is protected from
nobody; the Client-Id travels in clear over ws://. Ids the server invents (an anonymous client
without a Device-Id) are not pinned.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import OrderedDict

from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.state.store import PIN_SEEN_EVERY, Store, StoreError
from vixio.transports.xiaozhi.session.auth import DeviceIdentity

MAX_CLIENT_ID_CHARS = 128
"""A longer Client-Id is cut to this before it is pinned or compared (a UUID is 36)."""
CLAIMED_PREFIX_CHARS = 52
"""How much of a claimed Device-Id a claimant's own id keeps: with "~" and ten hex digits, 63 characters."""
REBINDS_PER_DEVICE = 4
"""Pending re-binds kept per device (its most recent claimants)."""
REBINDS_TOTAL = 256
"""Pending re-binds kept in all (the most recent)."""
MAX_CLAIM_DEPTH = 3
"""A claimant's own id may itself be pinned to someone else (claimed directly); its claimant's id
is derived again, this many times at most before the connection is refused."""
_THROTTLED_DEVICES = 1024
"""Devices whose claimant log lines are throttled separately (the least recent beyond this share afresh)."""


class IdentityRefused(Exception):
    """No id could be found to serve this contact under."""


def claimant_device_id(claimed: str, client_id: str) -> str:
    """The id a contact claiming `claimed` with another Client-Id is served under (at most 63 characters)."""
    digest = hashlib.sha256(f"{claimed}\0{client_id}".encode()).hexdigest()[:10]
    return f"{claimed[:CLAIMED_PREFIX_CHARS]}~{digest}"


class IdentityPins:
    """Pins device ids to Client-Ids in the store and tells a device from a claimant."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._claims: OrderedDict[str, LogThrottle] = OrderedDict()
        self._failures = LogThrottle(first=1, every=60.0)

    async def is_pinned(self, device_id: str, client_id: str, *, via: str) -> bool:
        """Whether (device_id, client_id) is the device's pin, pinning it on first contact. A
        claimant (another Client-Id) gets a pending re-bind and one log line (throttled). A store
        that cannot be reached raises StoreError."""
        client_id = client_id[:MAX_CLIENT_ID_CHARS]
        pin = await self.store.identity_pin(device_id)  # a read: most contacts write nothing
        if pin is None or (pin.client_id == client_id and time.time() - pin.seen >= PIN_SEEN_EVERY):
            pin = await self.store.pin_identity(device_id, client_id)  # the first writer wins
        if pin.client_id == client_id:
            return True
        await self._claimed(device_id, client_id, via)
        return False

    async def pinned_client(self, device_id: str) -> str | None:
        """The Client-Id `device_id` is pinned to; None when it has no pin or the store cannot say."""
        try:
            pin = await self.store.identity_pin(device_id)
        except StoreError:
            return None
        return None if pin is None else pin.client_id

    async def resolve(self, identity: DeviceIdentity) -> DeviceIdentity:
        """The identity to serve a WebSocket contact under: as it came when its pair is pinned (or
        pinned now, or the server invented the id), else a claimant's own (`claimed` names what it
        claimed). While the store cannot be reached every contact is served as a claimant: its
        memory is not read anyway, and nobody else's is given away."""
        if identity.invented:
            return identity
        device_id, client_id = identity.device_id, identity.client_id[:MAX_CLIENT_ID_CHARS]
        for depth in range(MAX_CLAIM_DEPTH + 1):
            try:
                if await self.is_pinned(device_id, client_id, via="WebSocket" if depth == 0 else "claimant"):
                    break
            except StoreError as exc:
                if self._failures.hit() is not None:
                    logger.bind(device=identity.device_id).warning(
                        "identity pins cannot be read ({}): devices are served under ids of their own until the "
                        "state store answers",
                        exc,
                    )
                return dataclasses.replace(
                    identity, device_id=claimant_device_id(device_id, client_id), claimed=identity.device_id
                )
            device_id = claimant_device_id(device_id, client_id)
        else:
            raise IdentityRefused(f"{identity.device_id}: its claimant ids are pinned to other Client-Ids")
        if device_id == identity.device_id:
            return identity
        return dataclasses.replace(identity, device_id=device_id, claimed=identity.device_id)

    async def _claimed(self, device_id: str, client_id: str, via: str) -> None:
        throttle = self._claims.pop(device_id, None) or LogThrottle(first=1, every=300.0)
        self._claims[device_id] = throttle
        while len(self._claims) > _THROTTLED_DEVICES:
            self._claims.popitem(last=False)
        hit = throttle.hit()
        if hit is not None:
            more = f" ({hit} more since the last line)" if hit > 1 else ""
            logger.bind(device=device_id).warning(
                "{} {} came with Client-Id {!r}, not the one it is pinned to: treated as another device (an empty "
                "memory, no token); if it is the board re-flashed, an operator approves its re-bind (`vixio identity "
                "list`, or the console){}",
                via,
                device_id,
                client_id[:40],
                more,
            )
        if via != "claimant":  # a claimant of a claimant's own id is nobody's re-flashed board
            try:
                await self.store.request_rebind(device_id, client_id, REBINDS_PER_DEVICE, REBINDS_TOTAL)
            except StoreError:
                pass  # the store logged it; the next attempt records it again
