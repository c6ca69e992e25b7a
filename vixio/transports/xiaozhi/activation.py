"""The optional activation step: a device shows a 6-digit code until an operator confirms it."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from vixio.transports.xiaozhi.config import ActivationConfig

MAX_PENDING_ACTIVATIONS = 1024
"""Oldest pending codes are forgotten past this, so unknown devices cannot grow memory."""


@dataclass(frozen=True, slots=True)
class PendingActivation:
    """A device waiting for an operator to confirm the code it shows."""

    code: str
    """Six digits, shown and spoken by the device."""
    challenge: str
    """Random nonce; the firmware's /activate step fails at once without one."""


class ActivationRegistry:
    """Codes of devices waiting to be bound, and the confirmed devices (kept in `state_file`)."""

    def __init__(self, config: ActivationConfig) -> None:
        self._path = Path(config.state_file)
        self._pending: dict[str, PendingActivation] = {}
        self._confirmed = self._load()

    def _load(self) -> set[str]:
        if not self._path.exists():
            return set()
        try:
            devices = json.loads(self._path.read_text(encoding="utf-8"))["confirmed"]
            if not isinstance(devices, list):
                raise TypeError("'confirmed' is not a list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"activation.state_file {self._path}: unreadable ({exc}); expected "
                '{"confirmed": ["aa:bb:cc:dd:ee:ff", ...]}; fix or delete the file'
            ) from exc
        return {str(device).lower() for device in devices}

    def _save(self) -> None:
        # A few hundred bytes, written only when an operator confirms: blocking I/O is fine here.
        self._path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self._path.with_name(self._path.name + ".tmp")
        temporary.write_text(json.dumps({"confirmed": sorted(self._confirmed)}, indent=2), encoding="utf-8")
        os.replace(temporary, self._path)

    def is_confirmed(self, device_id: str) -> bool:
        """Whether an operator confirmed this device (now or in an earlier run)."""
        return device_id in self._confirmed

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

    def confirm(self, code: str) -> str | None:
        """Confirm the device showing `code` and persist it; returns its id, or None if no device shows it."""
        for device_id, entry in self._pending.items():
            if entry.code == code:
                self._confirmed.add(device_id)
                self._save()
                del self._pending[device_id]  # only once persisted, so a failed write can be retried
                return device_id
        return None
