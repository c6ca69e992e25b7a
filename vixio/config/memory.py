"""Configuration of the state store (`state:`) and of what devices remember (`memory:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from vixio.core.settings import StrictModel

MIN_SECRET_CHARS, MAX_SECRET_CHARS = 16, 512
"""Bounds of `state.fleet_secret`: short ones can be guessed offline from one captured call."""
FLEET_SECRET_MISSING = (
    "state.fleet_secret is not set: with state.backend 'redis' the instances call each other over Redis "
    "(closing a device's stale session, the console, pairing, activation) and these calls are signed with it; "
    "set the same random secret on every instance, e.g. `fleet_secret: ${VIXIO_FLEET_SECRET}` with "
    "VIXIO_FLEET_SECRET=$(openssl rand -hex 32) (docs/security.md#redis)"
)
"""What `vixio config check` and `vixio serve` say about a fleet without its secret (vixio/config/preflight.py)."""


class StateConfig(StrictModel):
    """Where vixio keeps what outlives a session: activations, conversation history, memory, pairing approvals, the live-session directory (docs/privacy.md)."""

    backend: Literal["sqlite", "redis"] = "sqlite"
    """"sqlite": one file on this machine (`state.path`), shared by its worker processes. "redis": a Redis or Valkey server (`state.url`, the `redis` extra), shared by every vixio instance of a fleet."""
    path: str = ".vixio/state.db"
    """The SQLite file (relative paths from the working directory); its folder is created on first run. Every worker process opens the same file, so it must be on a local disk (SQLite's WAL mode does not work over a network file system)."""
    lock_timeout: float = Field(default=5.0, gt=0)
    """Seconds an access waits while another process holds the file locked; then startup fails (naming the file) or the write is reported lost."""
    max_mb: float | None = Field(default=None, gt=0)
    """Largest size of the file in MB; writes beyond it fail as on a full disk (one ERROR, conversations go on). null: no cap."""
    url: str = "redis://127.0.0.1:6379/0"
    """Redis: the server, `redis://[:password@]host:port/db`, `rediss://...` for TLS, or `unix:///path/redis.sock?db=0`. A password in the URL must be percent-encoded; `state.password` is the other way."""
    password: str | None = None
    """Redis: the password (wins over one in `state.url`); write `${REDIS_PASSWORD}` to take it from the environment."""
    fleet_secret: str | None = None
    """Redis: the secret every instance of the fleet shares; the calls between instances over Redis (closing a device's stale session, the console, pairing, activation) are signed with it (HMAC-SHA256) and an unsigned, forged or replayed one is dropped. Required with `state.backend: redis`; at least 16 characters, e.g. `openssl rand -hex 32`. Write `${VIXIO_FLEET_SECRET}` to take it from the environment (docs/security.md#redis)."""
    fleet_secret_rotating: str | None = None
    """Redis: while the fleet secret is changed, a second secret also accepted on received calls (never used to sign): set the new one here on every instance, then swap the two, then remove this (docs/security.md#redis). null or empty: none."""
    prefix: str = Field(default="vixio:", min_length=1, max_length=64)
    """Redis: the start of every key vixio writes, so several fleets (or other programs) can share one server."""
    timeout: float = Field(default=1.0, gt=0, le=30)
    """Redis: seconds a command (or connecting) may take; past it the call fails rather than hold a conversation up. A read that fails gives an empty answer to the session (a new conversation), a write is lost (one ERROR per outage)."""
    max_turns: int = Field(default=1000, ge=10, le=100_000)
    """Redis: turns kept per device (the oldest go first), on top of the age limit `memory.history_days` both backends apply."""

    @field_validator("fleet_secret", "fleet_secret_rotating")
    @classmethod
    def _secret(cls, secret: str | None) -> str | None:
        if not secret:
            return None  # `${VIXIO_FLEET_SECRET:-}` with the variable unset
        if len(secret) < MIN_SECRET_CHARS or len(secret) > MAX_SECRET_CHARS:
            raise ValueError(
                f"expected {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters (e.g. `openssl rand -hex 32`), "
                f"got {len(secret)}"
            )
        return secret

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str) -> str:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                "expected redis://[:password@]host:port/db, rediss://... (TLS) or unix:///path/to/redis.sock"
            )
        return url


class MemoryConfig(StrictModel):
    """What a device remembers between connections (docs/privacy.md says what is stored and how to erase it)."""

    enabled: bool = True
    """Store each device's conversation and restore it when the device comes back; false stores nothing (and reads nothing)."""
    resume_minutes: float = Field(default=10.0, ge=0)
    """A device that reconnects within this many minutes of its last turn continues the same conversation: the turns it heard are put back into the model's history. 0 always starts afresh. A background tool's result that finished while the device was away is kept in the state store this long (at most 16 per device) for its next session, on any worker and across restarts."""
    max_turns: int = Field(default=20, ge=1, le=500)
    """Turns (a user message and the reply the device played) restored on a resume; the model's own history bound (`agent.max_history_messages`) still applies."""
    history_days: float = Field(default=30.0, gt=0)
    """Days a stored turn is kept; older ones are deleted at startup and every hour."""
    long_term: Literal["facts", "model", "verbatim", "off"] = "facts"
    """What each device remembers beyond its conversations, carried in the instructions of the next ones (docs/memory.md): "facts" learns facts (names, likes, dislikes, birthdays and dates, family, where they live, what the user asked to be remembered) from every utterance by rules, in English and Mandarin, offline, storing nothing the model made up; "model" also asks `memory.model` (else a litellm agent's model) for facts as JSON, checked against what the user said, every 10 utterances and when the conversation ends (the rules' facts stand when it fails); "verbatim" keeps the latest turns as they were said (the earlier default); "off" keeps none. The offline local-llama model cannot extract facts: with it, "model" without `memory.model` falls back to "facts"."""
    model: str | None = None
    """The litellm model name that updates long-term memory; null: the agent's model. It is called with the agent's `api_base` and `api_key`."""
    max_chars: int = Field(default=600, ge=50, le=4000)
    """Longest long-term memory per device, in characters; with facts, the most characters of facts the instructions carry (identity first, then the facts about what the user just said)."""
