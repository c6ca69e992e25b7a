"""What vixio keeps beyond one session (vixio/state/store.py explains the interface).

    store = open_store(config.state)    # not yet opened: `await store.open()` does the I/O

`store.py` is the interface and its records, `sqlite.py` the default backend (`sqlite_schema.py`
its migrations), `memory.py` what a session remembers and restores through it, `pairings.py` companion approvals
for the transport, `cli.py` `vixio memory`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vixio.state.store import (
    Admission,
    DeviceMemory,
    LiveSession,
    PairingApproval,
    Store,
    StoredTurn,
    StoreError,
    StoreWriteError,
)

if TYPE_CHECKING:
    from vixio.config.memory import StateConfig

__all__ = ["Admission", "DeviceMemory", "LiveSession", "PairingApproval", "Store", "StoreError", "StoreWriteError",
           "StoredTurn", "open_store"]


def open_store(config: StateConfig) -> Store:
    """The store `config` describes (SQLite at `state.path`), ready for `await store.open()`."""
    from vixio.state.sqlite import SqliteStore

    max_bytes = None if config.max_mb is None else int(config.max_mb * 2**20)
    return SqliteStore(config.path, lock_timeout=config.lock_timeout, max_bytes=max_bytes)
