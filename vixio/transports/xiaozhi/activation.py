"""The optional activation step: a device shows a 6-digit code until an operator confirms it.

Pending codes live in this process (the one serving OTA; in a fleet, the instance that answered
the device's OTA request, asked by the others when a code is not theirs); confirmed devices are admissions in the
state store (vixio/state/), so every worker and every restart sees them. The JSON file earlier
versions kept them in (`activation.state_file`) is imported once and renamed `<file>.imported`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from loguru import logger

from vixio.transports.xiaozhi.config import ActivationConfig

MAX_PENDING_ACTIVATIONS = 1024
"""Oldest pending codes are forgotten past this, so unknown devices cannot grow memory."""


class AdmissionStore(Protocol):
    """What activation needs of the state store (vixio.state.Store has it)."""

    async def admission(self, device_id: str) -> Any | None: ...

    async def admit(self, device_id: str, via: Literal["activation", "allow-list"]) -> None: ...


@dataclass(frozen=True, slots=True)
class PendingActivation:
    """A device waiting for an operator to confirm the code it shows."""

    code: str
    """Six digits, shown and spoken by the device."""
    challenge: str
    """Random nonce; the firmware's /activate step fails at once without one."""


class ActivationRegistry:
    """Codes of devices waiting to be bound; confirmed devices are admissions in `store`."""

    def __init__(self, config: ActivationConfig, store: AdmissionStore) -> None:
        self._legacy_file = Path(config.state_file)
        self._store = store
        self._pending: dict[str, PendingActivation] = {}
        self.elsewhere: Callable[[str], Awaitable[str | None]] | None = None
        """A fleet: confirms a code another instance gave its device (vixio/serve/fleet_activation.py)."""

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
        logger.info("activation: {} confirmed device(s) imported from {} into the state store; the file is now {}",
                    len(devices), path, imported)
        return len(devices)

    async def is_confirmed(self, device_id: str) -> bool:
        """Whether an operator let this device in (now, in an earlier run, or from another worker)."""
        return await self._store.admission(device_id) is not None

    def pending(self, device_id: str) -> PendingActivation:
        """The device's code, created on first use and kept until confirmed."""
        existing = self._pending.get(device_id)
        if existing is not None:
            return existing
        if len(self._pending) >= MAX_PENDING_ACTIVATIONS:
            self._pending.pop(next(iter(self._pending)))
        in_use = {entry.code for entry in self._pending.values()}
        code = f"{secrets.randbelow(1_000_000):06d}"
        while code in in_use:
            code = f"{secrets.randbelow(1_000_000):06d}"
        entry = PendingActivation(code=code, challenge=secrets.token_hex(16))
        self._pending[device_id] = entry
        return entry

    async def confirm(self, code: str, *, ask_elsewhere: bool = True) -> str | None:
        """Confirm the device showing `code` and store it; returns its id, or None if no device
        shows it (here, or on another instance of a fleet: `elsewhere`). A failed write
        (StoreWriteError) leaves the code pending, to be confirmed again."""
        for device_id, entry in self._pending.items():
            if entry.code == code:
                await self._store.admit(device_id, via="activation")
                self._pending.pop(device_id, None)
                return device_id
        if ask_elsewhere and self.elsewhere is not None:
            return await self.elsewhere(code)
        return None
