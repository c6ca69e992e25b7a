"""What vixio keeps beyond one session (vixio/state/store.py explains the interface).

    store = open_store(config.state)    # not yet opened: `await store.open()` does the I/O

`store.py` is the interface and its records, `sqlite.py` the default backend (`sqlite_thread.py`
the thread that owns its connection, `sqlite_schema.py` its migrations), `redis.py` the fleet's
(`redis_scripts.py` its atomic calls), `cli.py` `vixio memory`. Facts (docs/memory.md):
`facts.py` the record and its store methods (`sqlite_facts.py`, `redis_facts.py`), `fact_rules.py`
what the rules extract, `fact_model.py` a model's checked JSON, `fact_merge.py` merging and the
instructions' note, `fact_learner.py` one conversation's learning, `fact_forget.py` forgetting one
fact, `spoken.py` which utterances ask about memory, `prune.py` the hourly prune. What a session
remembers and restores is vixio/memory/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vixio.state.store import (
    Admission,
    DeviceMemory,
    DeviceRecord,
    IdentityPin,
    LiveSession,
    PairingApproval,
    RebindRequest,
    Store,
    StoredTurn,
    StoreError,
    StoreWriteError,
)

if TYPE_CHECKING:
    from vixio.config.memory import MemoryConfig, StateConfig

__all__ = [
    "Admission",
    "DeviceMemory",
    "DeviceRecord",
    "IdentityPin",
    "LiveSession",
    "PairingApproval",
    "RebindRequest",
    "Store",
    "StoreError",
    "StoreWriteError",
    "StoredTurn",
    "open_store",
]


def open_store(config: StateConfig, memory: MemoryConfig | None = None) -> Store:
    """The store `config` describes (SQLite at `state.path`, or Redis at `state.url`), ready for
    `await store.open()`. `memory` gives Redis the age at which a device's history expires."""
    if config.backend == "redis":
        try:
            import redis.asyncio  # noqa: F401 - the extra's module, looked for before anything connects
        except ImportError as exc:
            from vixio.config.extras import install_hint

            raise StoreError(
                f"state.backend 'redis' needs the 'redis' extra, which is not installed ({exc.name or 'redis'} "
                f"missing): {install_hint('redis')}"
            ) from None
        from vixio.state.redis import RedisStore

        history_days = 30.0 if memory is None else memory.history_days
        return RedisStore(
            config.url,
            password=config.password,
            prefix=config.prefix,
            timeout=config.timeout,
            max_turns=config.max_turns,
            history_seconds=history_days * 86400,
        )
    from vixio.state.sqlite import SqliteStore

    max_bytes = None if config.max_mb is None else int(config.max_mb * 2**20)
    return SqliteStore(config.path, lock_timeout=config.lock_timeout, max_bytes=max_bytes)
