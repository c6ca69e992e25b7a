"""Companion pairing approvals in the state store, behind the transport's `PairingStore`.

Pairing decisions are synchronous (vixio/transports/xiaozhi/companions/pairing.py), so each process keeps
the approvals in memory: loaded at startup, changed here at once and written behind, and read
again by `sync()` — which the console calls after an approval or revocation, in the process
that made it (to wait for the write) and then in every worker (to see it). The JSON file in
which the first release kept approvals (`xiaozhi.pairing.state_file`) is imported once by the
process that serves the console, then renamed `<file>.imported`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from pathlib import Path

from loguru import logger

from vixio.state.store import PairingApproval, Store, StoreError
from vixio.transports.xiaozhi.companions.store import MAX_APPROVALS, Approval, CompanionKey, PairingFile


class StorePairings:
    """`PairingStore` over the state store (see the module docstring)."""

    def __init__(self, store: Store, legacy_file: str | Path = "") -> None:
        self.store = store
        self.legacy_file = Path(legacy_file) if legacy_file else None
        self._approved: dict[CompanionKey, Approval] = {}
        self._writes: list[asyncio.Future[object]] = []

    async def load(self, *, import_legacy: bool = False) -> None:
        """Read every approval (after `store.open()`); `import_legacy`: first move the JSON file's in."""
        if import_legacy and self.legacy_file is not None and self.legacy_file.exists():
            legacy = PairingFile(self.legacy_file).approvals()  # a ValueError names the file if unreadable
            for approval in legacy:
                key = approval.key
                await self.store.approve_pairing(key.mac, key.companion, key.client_id)
            imported = self.legacy_file.with_name(self.legacy_file.name + ".imported")
            os.replace(self.legacy_file, imported)
            logger.info(
                "pairing: {} approval(s) imported from {} into the state store; the file is now {}",
                len(legacy),
                self.legacy_file,
                imported,
            )
        self._approved = {_key(row): Approval(_key(row), row.at) for row in await self.store.pairings()}

    async def sync(self) -> None:
        """Wait for this process's writes, then read what every process approved or revoked."""
        writes, self._writes = self._writes, []
        failed = [
            outcome
            for outcome in await asyncio.gather(*writes, return_exceptions=True)
            if isinstance(outcome, BaseException)
        ]
        try:
            await self.load()  # a write that failed is undone here too
        except StoreError as exc:
            logger.warning("pairing approvals not re-read, the last ones read stay: {}", exc)
        if failed:
            raise failed[0]

    def is_approved(self, key: CompanionKey) -> bool:
        return key in self._approved

    def approvals(self) -> list[Approval]:
        return sorted(self._approved.values(), key=lambda approval: approval.approved_at)

    def approve(self, key: CompanionKey) -> Approval:
        existing = self._approved.get(key)
        if existing is not None:
            return existing
        approval = self._approved[key] = Approval(key, round(time.time(), 3))
        self._write(self.store.approve_pairing(key.mac, key.companion, key.client_id))
        while len(self._approved) > MAX_APPROVALS:
            oldest = min(self._approved.values(), key=lambda entry: entry.approved_at)
            self._forget(oldest)
        return approval

    def revoke(self, pairing_id: str) -> Approval | None:
        found = next((approval for key, approval in self._approved.items() if key.id == pairing_id), None)
        if found is not None:
            self._forget(found)
        return found

    def _forget(self, approval: Approval) -> None:
        del self._approved[approval.key]
        key = approval.key
        self._write(self.store.revoke_pairing(key.mac, key.companion, key.client_id))

    def _write(self, write: Awaitable[object]) -> None:
        # Queued now, in call order (a task's first step puts its job on the store's queue).
        self._writes.append(asyncio.ensure_future(write))


def _key(row: PairingApproval) -> CompanionKey:
    return CompanionKey(row.companion, row.client_id, row.device_id)
