"""The optional activation step: a device shows a 6-digit code until an operator confirms it,
or (activation v2, activation_proof.py) proves with its eFuse key that it is one the owner listed.

Pending codes live in this process (the one serving OTA; in a fleet, the instance that answered
the device's OTA request, asked by the others when a code or a challenge is not theirs); confirmed
devices are admissions in the state store (vixio/state/), so every worker and every restart sees
them. The JSON file earlier versions kept them in (`activation.state_file`) is imported once and
renamed `<file>.imported`.

Unknown callers cannot take a waiting device's code away: at most `MAX_PENDING_ACTIVATIONS`
codes are kept, only codes whose device has not asked for `STALE_AFTER` seconds make room for
new ones (a full registry refuses new devices instead), and one client address creates at most
`activation.new_codes_per_minute` codes.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from loguru import logger

from vixio.config.xiaozhi import ActivationConfig
from vixio.transports.xiaozhi.http.activation_proof import ActivationRefused, DeviceKeys, DeviceProof

MAX_PENDING_ACTIVATIONS = 1024
"""Codes kept at once, so unknown devices cannot grow memory."""
STALE_AFTER = 180.0
"""Seconds after a device's last OTA or /activate request when its code may make room for another.
A waiting device polls every 3-10 s and asks OTA again at least every ~2 minutes (main/application.cc)."""
MAX_TRACKED_ADDRESSES = 4096
"""Client addresses whose new codes are counted at once; the oldest windows are dropped past it."""
MAX_USED_CHALLENGES = 4096
"""Challenges remembered as consumed by a proof, to name a replay as such."""


class AdmissionStore(Protocol):
    """What activation needs of the state store (vixio.state.Store has it)."""

    async def admission(self, device_id: str) -> Any | None: ...

    async def admit(self, device_id: str, via: Literal["activation", "allow-list"]) -> None: ...


@dataclass(slots=True)
class PendingActivation:
    """A device waiting for an operator to confirm the code it shows (or to prove its key)."""

    code: str
    """Six digits, shown and spoken by the device."""
    challenge: str
    """Random nonce; the firmware's /activate step fails at once without one, and activation v2
    signs it with the device's eFuse key."""
    seen: float = 0.0
    """Monotonic time of the device's latest OTA or /activate request."""


class _AddressRate:
    """At most `limit` new codes per client address in each minute (0: no limit), for a bounded set of addresses."""

    def __init__(self, limit: int, clock: Callable[[], float]) -> None:
        self.limit = limit
        self._clock = clock
        self._windows: OrderedDict[str, list[float]] = OrderedDict()
        """address -> [window start, count], oldest window first."""

    def allow(self, address: str) -> bool:
        if self.limit == 0:
            return True
        now = self._clock()
        window = self._windows.get(address)
        if window is None or now - window[0] >= 60.0:
            self._windows.pop(address, None)
            while len(self._windows) >= MAX_TRACKED_ADDRESSES:
                self._windows.popitem(last=False)
            window = self._windows[address] = [now, 0]
        window[1] += 1
        return window[1] <= self.limit


class ActivationRegistry:
    """Codes of devices waiting to be bound; confirmed devices are admissions in `store`."""

    def __init__(
        self, config: ActivationConfig, store: AdmissionStore, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._legacy_file = Path(config.state_file)
        self._store = store
        self._clock = clock
        self._pending: OrderedDict[str, PendingActivation] = OrderedDict()
        """device id -> its code, the least recently seen first."""
        self._by_code: dict[str, str] = {}
        self._new_codes = _AddressRate(config.new_codes_per_minute, clock)
        self._used: OrderedDict[str, None] = OrderedDict()
        self.keys = DeviceKeys.load(config.device_keys, config.device_keys_file)
        """The owner's device keys (activation v2); empty: every device waits for its code."""
        self.elsewhere: Callable[[str], Awaitable[str | None]] | None = None
        """A fleet: confirms a code another instance gave its device (vixio/fleet/activation.py)."""
        self.prove_elsewhere: Callable[[str, DeviceProof], Awaitable[None]] | None = None
        """A fleet: checks a proof of a challenge another instance issued (raises ActivationRefused)."""

    async def import_legacy_file(self) -> int:
        """Admit the devices confirmed in `activation.state_file` (earlier versions), then rename the
        file so it is read once; how many were imported. Admitting twice is harmless, so a crash
        between the two steps only repeats the import."""
        path = self._legacy_file
        if not path.exists():
            return 0
        try:
            devices = json.loads(path.read_text(encoding="utf-8"))["confirmed"]
            if not isinstance(devices, list):
                raise TypeError("'confirmed' is not a list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"activation.state_file {path}: unreadable ({exc}); expected "
                '{"confirmed": ["aa:bb:cc:dd:ee:ff", ...]}; fix or delete the file'
            ) from exc
        for device in devices:
            await self._store.admit(str(device).lower(), via="activation")
        imported = path.with_name(path.name + ".imported")
        os.replace(path, imported)
        logger.info(
            "activation: {} confirmed device(s) imported from {} into the state store; the file is now {}",
            len(devices),
            path,
            imported,
        )
        return len(devices)

    async def is_confirmed(self, device_id: str) -> bool:
        """Whether an operator let this device in (now, in an earlier run, or from another worker)."""
        return await self._store.admission(device_id) is not None

    def pending(self, device_id: str, address: str = "local") -> PendingActivation:
        """The device's code, created on first use and kept until confirmed (or, once the device
        stopped asking, until room is needed). `address` is the client's (http_limits.address_key).
        Raises ActivationRefused for a new device when `address` created too many codes this
        minute, or when every kept code belongs to a device still asking."""
        now = self._clock()
        existing = self._pending.get(device_id)
        if existing is not None:
            existing.seen = now
            self._pending.move_to_end(device_id)
            return existing
        if not self._new_codes.allow(address):
            raise ActivationRefused(
                "rate",
                "too many new devices from your address this minute "
                "(xiaozhi.activation.new_codes_per_minute); try again later",
                429,
            )
        while len(self._pending) >= MAX_PENDING_ACTIVATIONS:
            oldest_id, oldest = next(iter(self._pending.items()))
            if now - oldest.seen < STALE_AFTER:
                raise ActivationRefused(
                    "full", f"{MAX_PENDING_ACTIVATIONS} devices are waiting for activation; try again later", 503
                )
            self._forget(oldest_id)
        code = f"{secrets.randbelow(1_000_000):06d}"
        while code in self._by_code:
            code = f"{secrets.randbelow(1_000_000):06d}"
        entry = PendingActivation(code=code, challenge=secrets.token_hex(16), seen=now)
        self._pending[device_id] = entry
        self._by_code[code] = device_id
        return entry

    def _forget(self, device_id: str) -> None:
        entry = self._pending.pop(device_id, None)
        if entry is not None:
            self._by_code.pop(entry.code, None)

    async def confirm(self, code: str, *, ask_elsewhere: bool = True) -> str | None:
        """Confirm the device showing `code` and store it; returns its id, or None if no device
        shows it (here, or on another instance of a fleet: `elsewhere`). A failed write
        (StoreWriteError) leaves the code pending, to be confirmed again."""
        device_id = self._by_code.get(code)
        if device_id is not None:
            await self._store.admit(device_id, via="activation")
            self._forget(device_id)
            return device_id
        if ask_elsewhere and self.elsewhere is not None:
            return await self.elsewhere(code)
        return None

    async def prove(self, device_id: str, proof: DeviceProof, *, ask_elsewhere: bool = True) -> None:
        """Admit `device_id` when `proof` signs, with the key of its serial number, the challenge
        this server gave this device (it is then used up); raises ActivationRefused otherwise.
        A challenge not issued here is asked of the other instances of a fleet (`prove_elsewhere`)."""
        key = self.keys.get(proof.serial_number)
        if key is None:
            raise ActivationRefused(
                "unknown_serial",
                f"serial number {proof.serial_number!r} has no key in "
                "xiaozhi.activation.device_keys; the operator can confirm the code the device shows",
            )
        entry = self._pending.get(device_id)
        if entry is None or not secrets.compare_digest(entry.challenge, proof.challenge):
            if proof.challenge in self._used:
                raise ActivationRefused(
                    "used", "this challenge was already used; the device gets a new one when it asks OTA again"
                )
            if ask_elsewhere and self.prove_elsewhere is not None:
                await self.prove_elsewhere(device_id, proof)
                return
            raise ActivationRefused(
                "not_issued",
                "this challenge was not issued to this device (or has expired); "
                "the device gets a new one when it asks OTA again",
            )
        if not proof.verifies(key):
            raise ActivationRefused(
                "bad_hmac",
                f"the hmac does not verify with the key of serial number "
                f"{proof.serial_number!r}; the operator can confirm the code the device shows",
            )
        await self._store.admit(device_id, via="activation")
        self._forget(device_id)
        self._used[proof.challenge] = None
        while len(self._used) > MAX_USED_CHALLENGES:
            self._used.popitem(last=False)
