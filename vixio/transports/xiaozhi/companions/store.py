"""Operator approvals of companions, remembered across restarts.

An approval lets one companion — its handshake `Device-Id` and `Client-Id` — pair with one
device MAC. `PairingStore` is what the rest of the code speaks to; `PairingFile` keeps the
approvals in a small JSON file next to the activation state:

    {"approved": [{"companion": "robot-1", "client_id": "…", "mac": "aa:bb:cc:dd:ee:ff",
                   "approved_at": 1764070000.0}]}

One process writes it (the one serving the operator console: the only process, or the
supervisor of `vixio serve --workers N`); every process reads it, and re-reads it when its
inode, modification time or size changed, so a worker honours an approval written by the supervisor.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from loguru import logger

_NOT_HEX = re.compile(r"[^0-9a-f]")
MAX_APPROVALS = 4096
"""Approvals kept; approving past this forgets the oldest."""
MAX_ID_CHARS = 128
"""Longest companion or client id remembered (the handshake cuts anonymous ids to this too)."""


def normalize_mac(value: str) -> str:
    """`aa:bb:cc:dd:ee:ff` for any spelling of a 48-bit MAC address, else ""."""
    digits = _NOT_HEX.sub("", value.lower()) if isinstance(value, str) else ""
    if len(digits) != 12 or len(value) > 20:
        return ""
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


@dataclass(frozen=True, slots=True)
class CompanionKey:
    """Who asks to pair with which device."""

    companion: str
    """The companion's own `Device-Id` (lowercase), as its handshake gave it."""
    client_id: str
    """The companion's `Client-Id` ("" when it sent none)."""
    mac: str
    """The device it names, normalised (`aa:bb:cc:dd:ee:ff`)."""

    @property
    def id(self) -> str:
        """A short stable id for the console and `vixio pairing`: the same in every process and run."""
        digest = hashlib.sha256(f"{self.companion}\0{self.client_id}\0{self.mac}".encode()).hexdigest()
        return digest[:10]


@dataclass(frozen=True, slots=True)
class Approval:
    """An operator let `key` pair (at `approved_at`, Unix time)."""

    key: CompanionKey
    approved_at: float

    def to_json(self) -> dict[str, object]:
        return {"id": self.key.id, **asdict(self.key), "approved_at": self.approved_at}


class PairingStore(Protocol):
    """Where approvals live: the state store (vixio/transports/xiaozhi/companions/stored.py) in a server, this file otherwise."""

    def is_approved(self, key: CompanionKey) -> bool:
        """Whether an operator approved `key` (now or in an earlier run, in any process)."""
        ...

    def approvals(self) -> list[Approval]:
        """Every approval, oldest first."""
        ...

    def approve(self, key: CompanionKey) -> Approval:
        """Remember `key` as approved (kept when it already is)."""
        ...

    def revoke(self, pairing_id: str) -> Approval | None:
        """Forget the approval with this id; returns it, or None when there was none."""
        ...

    async def sync(self) -> None:
        """Make this process's approvals and revocations durable and see every other process's
        (called after an operator's action, before applying it)."""
        ...


class PairingFile:
    """`PairingStore` in a JSON file (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._approved: dict[CompanionKey, Approval] = {}
        self._seen: tuple[int, int, int] | None = None
        """(inode, mtime_ns, size) of the file as last read (a save replaces the inode); None when absent."""
        self._reload(force=True)

    def is_approved(self, key: CompanionKey) -> bool:
        self._reload()
        return key in self._approved

    def approvals(self) -> list[Approval]:
        self._reload()
        return sorted(self._approved.values(), key=lambda approval: approval.approved_at)

    def approve(self, key: CompanionKey) -> Approval:
        self._reload()
        existing = self._approved.get(key)
        if existing is not None:
            return existing
        approval = Approval(key, round(time.time(), 3))
        approved = dict(self._approved)
        approved[key] = approval
        while len(approved) > MAX_APPROVALS:
            del approved[min(approved, key=lambda k: approved[k].approved_at)]
        self._save(approved)
        return approval

    async def sync(self) -> None:
        """Nothing to wait for: every change is written at once, and every read checks the file."""

    def revoke(self, pairing_id: str) -> Approval | None:
        self._reload()
        found = next((approval for key, approval in self._approved.items() if key.id == pairing_id), None)
        if found is not None:
            self._save({key: approval for key, approval in self._approved.items() if key != found.key})
        return found

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def _reload(self, *, force: bool = False) -> None:
        # One stat() per pairing decision (a registration or an operator's action, never per frame).
        seen = self._stat()
        if not force and seen == self._seen:
            return
        self._seen = seen
        if seen is None:
            self._approved = {}
            return
        try:
            self._approved = _parse(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if force:
                raise ValueError(
                    f"pairing.state_file {self.path}: unreadable ({exc}); expected "
                    '{"approved": [{"companion": ..., "client_id": ..., "mac": ...}]}; '
                    "fix or delete the file"
                ) from exc
            # Changed under a running server: keep what was read last (a writer may be mid-way).
            logger.warning("pairing.state_file {}: unreadable ({}); keeping the approvals read before", self.path, exc)

    def _save(self, approved: dict[CompanionKey, Approval]) -> None:
        # A few KB, written only when an operator approves or revokes: blocking I/O is fine here.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entries = [
            {**asdict(a.key), "approved_at": a.approved_at}
            for a in sorted(approved.values(), key=lambda approval: approval.approved_at)
        ]
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        # Only this user reads who may pair with which device (as the state store's file).
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(json.dumps({"approved": entries}, indent=2, ensure_ascii=False))
        os.replace(temporary, self.path)
        self._approved = approved
        self._seen = self._stat()


def _parse(text: str) -> dict[CompanionKey, Approval]:
    entries = json.loads(text)["approved"]
    if not isinstance(entries, list):
        raise TypeError("'approved' is not a list")
    approved: dict[CompanionKey, Approval] = {}
    for entry in entries[-MAX_APPROVALS:]:
        key = CompanionKey(
            str(entry["companion"])[:MAX_ID_CHARS].lower(),
            str(entry.get("client_id", ""))[:MAX_ID_CHARS],
            normalize_mac(str(entry["mac"])),
        )
        if not key.mac:
            raise ValueError(f"{entry['mac']!r} is not a MAC address")
        approved[key] = Approval(key, float(entry.get("approved_at", 0.0)))
    return approved
