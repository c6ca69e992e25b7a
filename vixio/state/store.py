"""The state store: everything vixio keeps beyond one session, behind one small async interface.

    store = open_store(config.state)          # SqliteStore: one file shared by every worker
    await store.open()                        # creates the file, runs schema migrations
    await store.admit("aa:bb:cc:dd:ee:ff", via="activation")
    await store.put_turn(device, StoredTurn("c1", 0, "my name is Alice", "Hello Alice!", at=time.time()))
    turns = await store.recent_turns(device, limit=20)
    await store.close()

What it holds: who is let in (activation, run-time allow-list), profile assignments that win over
config, conversation turns, a short long-term memory per device, companion pairing approvals, the
directory of live sessions (which worker holds which device), the counts of limits every
process shares (vixio/state/limits.py), and who each device is: the Client-Id its id was first
seen with, and the re-binds that wait for an operator (vixio/transports/xiaozhi/session/identity.py). Backends implement `Store`;
nothing else in vixio speaks SQL (vixio/state/sqlite.py) or a Redis command. Every method may be
called from any task; writes never block the event loop. tests/state/ is the contract every
backend passes.

Failures: `StoreError` when the store cannot be used at all (corrupt, locked, unreachable): its
message names the file or server and what to do. `StoreWriteError` when one write was lost (disk
full): the backend logs one ERROR per episode, not per write, and callers that can go on (history,
memory) do; reads keep working. A read that cannot reach the store raises `StoreError` within
the backend's timeout, never hangs; callers that can go on treat it as "nothing stored". Every
backend's failures are counted (`vixio_store_errors_total` in `/metrics`): `Store` wraps the
interface methods a backend implements, so no backend has to remember to.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vixio.metrics.instruments import count_store_error
from vixio.state.claims import ClaimStore
from vixio.state.facts import FactStore
from vixio.state.reminders import ReminderStore
from vixio.state.voiceprints import VoiceprintStore

AdmissionKind = Literal["activation", "allow-list"]

SESSION_TTL = 30.0
"""Seconds a worker's live sessions stay listed after its last heartbeat (or session start)."""

PIN_SEEN_EVERY = 3600.0
"""Seconds between two moves of a pin's `seen` (so a connection costs no write to say it)."""


class StoreError(Exception):
    """The store cannot be used; the message names it and says what to do."""


class StoreWriteError(StoreError):
    """A write did not reach the store (e.g. the disk is full); earlier data is intact."""


@dataclass(frozen=True, slots=True)
class Admission:
    """A device an operator let in."""

    device_id: str
    via: AdmissionKind
    """"activation": its code was confirmed; "allow-list": added by id."""
    at: float
    """Unix time of the admission."""


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One exchange of a conversation, as the device's user heard it."""

    conversation: str
    """Id of the conversation; a resumed session continues its device's last one."""
    seq: int
    """Order within the conversation, from 0; putting a turn again with the same seq replaces it."""
    user: str
    """What the user said (empty for a turn the assistant started, e.g. a background result)."""
    assistant: str
    """The reply; only the part that was played when `interrupted`."""
    interrupted: bool = False
    at: float = 0.0
    """Unix time the turn began."""


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """Lasting facts about a device's user, carried into its next conversations."""

    text: str
    at: float
    """Unix time of the last update."""


@dataclass(frozen=True, slots=True)
class PairingApproval:
    """An operator allowed this companion to pair with this device."""

    device_id: str
    """The device's id (its MAC, aa:bb:cc:dd:ee:ff)."""
    companion: str
    """The companion's own Device-Id."""
    client_id: str
    """The companion's Client-Id ("" when it sent none)."""
    at: float


@dataclass(frozen=True, slots=True)
class IdentityPin:
    """The Client-Id a device id belongs to: the one it was first seen with, or an operator's re-bind."""

    device_id: str
    client_id: str
    """"" when the device sent none (no proof offered, so none asked of the next one)."""
    at: float
    """Unix time of the first contact (or of the re-bind)."""
    seen: float
    """Unix time this pair was last seen (moved on at most once per `PIN_SEEN_EVERY` seconds)."""


@dataclass(frozen=True, slots=True)
class RebindRequest:
    """Another Client-Id asked for a pinned device id: a re-flashed board, or a claimant."""

    device_id: str
    client_id: str
    """The Client-Id that asked (an approval pins the device id to it)."""
    first: float
    """Unix time of its first attempt."""
    last: float
    """Unix time of its latest attempt."""
    attempts: int


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """What the store keeps about one device, in short (the console's device list)."""

    device_id: str
    turns: int
    """Stored conversation turns."""
    last_turn: float | None
    """Unix time of its newest turn (None without turns)."""
    memory_chars: int
    """Length of its long-term memory (0 without one)."""
    updated: float
    """Unix time of its newest turn or memory update, whichever is later."""
    facts: int = 0
    """Facts remembered about its people (vixio/state/facts.py)."""


@dataclass(frozen=True, slots=True)
class LiveSession:
    """A session some worker is serving now."""

    session_id: str
    device_id: str
    worker: str
    """Which process holds it, e.g. "w0" (a fleet adds the host: "host-2/w1")."""
    started: float


class Store(ClaimStore, FactStore, ReminderStore, VoiceprintStore, ABC):
    """What vixio keeps beyond a session (facts: vixio/state/facts.py). Device ids are lowercase MACs or other printable ids."""

    location: str = ""
    """What to name in messages: the file path or the server URL."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in Store.__abstractmethods__:  # FactStore's included, and those a mixin brings
            method = getattr(cls, name, None)
            if (
                inspect.iscoroutinefunction(method)
                and not getattr(method, "_counts_store_errors", False)
                and not getattr(method, "__isabstractmethod__", False)
            ):
                setattr(cls, name, _counting_failures(method))

    @abstractmethod
    async def open(self) -> None:
        """Connect, create what is missing and run pending schema migrations (StoreError if it cannot)."""

    @abstractmethod
    async def close(self) -> None:
        """Finish pending writes and release the store; safe to call twice or unopened."""

    # --- who is let in ------------------------------------------------------------------------

    @abstractmethod
    async def admission(self, device_id: str) -> Admission | None:
        """How `device_id` was let in, or None."""

    @abstractmethod
    async def admit(self, device_id: str, via: AdmissionKind) -> None:
        """Let `device_id` in (an existing admission keeps its time and kind)."""

    @abstractmethod
    async def revoke(self, device_id: str) -> bool:
        """Take the admission back; False if there was none."""

    @abstractmethod
    async def admissions(self) -> list[Admission]:
        """Every admitted device, oldest first."""

    # --- profiles -----------------------------------------------------------------------------

    @abstractmethod
    async def assigned_profile(self, device_id: str) -> str | None:
        """The profile assigned at run time (wins over config), or None."""

    @abstractmethod
    async def assign_profile(self, device_id: str, profile: str | None) -> None:
        """Assign `profile` to `device_id`; None clears the assignment (config decides again)."""

    # --- conversation history -----------------------------------------------------------------

    @abstractmethod
    async def put_turn(self, device_id: str, turn: StoredTurn) -> None:
        """Add a turn, or replace the one with the same conversation and seq (an interrupted reply)."""

    @abstractmethod
    async def recent_turns(self, device_id: str, limit: int) -> list[StoredTurn]:
        """The device's last `limit` turns over all its conversations, oldest first."""

    @abstractmethod
    async def clear_history(self, device_id: str) -> int:
        """Delete every turn of `device_id`; how many there were."""

    @abstractmethod
    async def delete_turn(self, device_id: str, conversation: str, seq: int) -> bool:
        """Delete one turn; False if there was none."""

    @abstractmethod
    async def prune_history(self, before: float) -> int:
        """Delete every device's turns that began before unix time `before`; how many."""

    @abstractmethod
    async def devices(self, limit: int, offset: int = 0) -> list[DeviceRecord]:
        """Devices with stored turns or memory, the most recently updated first (a page of them)."""

    # --- long-term memory ---------------------------------------------------------------------

    @abstractmethod
    async def memory(self, device_id: str) -> DeviceMemory | None:
        """The device's long-term memory, or None."""

    @abstractmethod
    async def set_memory(self, device_id: str, text: str) -> None:
        """Replace the device's long-term memory; empty text clears it."""

    # --- results held for a device that is away ----------------------------------------------

    @abstractmethod
    async def hold_result(self, device_id: str, payload: str, until: float, keep: int) -> None:
        """Keep `payload` (opaque text) for the device until unix time `until`; past `keep` held
        for it, the oldest go."""

    @abstractmethod
    async def take_results(self, device_id: str) -> list[str]:
        """Remove the device's held payloads and return those not yet expired, oldest first; one
        caller gets each (two workers asking at once share nothing)."""

    @abstractmethod
    async def prune_results(self, before: float) -> int:
        """Delete held results whose time ended before unix time `before`; how many."""

    # --- limits shared by every process --------------------------------------------------------

    @abstractmethod
    async def count_event(self, key: str, window: float) -> int:
        """Count one event under `key` in its current window of `window` seconds (fixed windows:
        one starts with the first event after the last ended); how many there were in it so far,
        this one included. Every process on this store counts together (a fleet's limits)."""

    # --- companion pairing --------------------------------------------------------------------

    @abstractmethod
    async def approve_pairing(self, device_id: str, companion: str, client_id: str = "") -> None:
        """Remember that `companion` (with `client_id`) may pair with `device_id` (kept if it may already)."""

    @abstractmethod
    async def revoke_pairing(self, device_id: str, companion: str, client_id: str = "") -> bool:
        """Forget that approval; False if there was none."""

    @abstractmethod
    async def pairings(self, device_id: str | None = None) -> list[PairingApproval]:
        """The approvals of one device, or of all, oldest first."""

    # --- live sessions ------------------------------------------------------------------------

    @abstractmethod
    async def session_started(self, session: LiveSession) -> None:
        """Record a live session (replacing one with the same id). Its worker counts as alive for
        `SESSION_TTL` seconds unless a heartbeat already said for how long."""

    @abstractmethod
    async def heartbeat(self, worker: str, ttl: float = SESSION_TTL, sessions: Sequence[LiveSession] = ()) -> list[str]:
        """`worker` is alive for `ttl` more seconds: its sessions stay in `live_sessions`. A worker
        that stops calling this (killed, its machine gone) has its sessions drop out `ttl` seconds
        after its last call; call it every `ttl / 3` or so. `sessions` (the worker's live ones)
        are recorded again where the store lost them (a Redis restarted empty, a FLUSHALL), in
        the same write; returns the ids of those it had to record again."""

    @abstractmethod
    async def session_ended(self, session_id: str) -> None:
        """Remove a live session; no error if unknown."""

    @abstractmethod
    async def live_sessions(self, device_id: str | None = None) -> list[LiveSession]:
        """Live sessions, of one device or all, oldest first (those of workers whose heartbeat
        expired are left out)."""

    @abstractmethod
    async def forget_sessions(self, workers: Sequence[str] | None = None) -> int:
        """Remove the sessions of `workers` (restarted), or all (a fresh start); how many."""

    # --- who each device is ---------------------------------------------------------------------

    @abstractmethod
    async def pin_identity(self, device_id: str, client_id: str) -> IdentityPin:
        """Pin `device_id` to `client_id` unless it is pinned already (the first writer wins, over
        every worker and instance at once); the pin in force. When that is this pair, its `seen`
        moves on (at most once per `PIN_SEEN_EVERY` seconds)."""

    @abstractmethod
    async def identity_pin(self, device_id: str) -> IdentityPin | None:
        """The device's pin, or None."""

    @abstractmethod
    async def repin_identity(self, device_id: str, client_id: str) -> None:
        """Pin `device_id` to `client_id` in place of any pin (an operator's re-bind); the device's
        pending re-binds go."""

    @abstractmethod
    async def unpin_identity(self, device_id: str) -> bool:
        """Drop the device's pin and pending re-binds; False if it had no pin."""

    @abstractmethod
    async def request_rebind(self, device_id: str, client_id: str, per_device: int, total: int) -> None:
        """Record that `client_id` asked for the pinned `device_id` (again: its count and time move
        on). Past `per_device` for the device, or `total` in all, the least recent go."""

    @abstractmethod
    async def rebind_requests(self, device_id: str | None = None) -> list[RebindRequest]:
        """Pending re-binds, of one device or all, the most recent attempt first."""

    @abstractmethod
    async def dismiss_rebind(self, device_id: str, client_id: str) -> bool:
        """Drop one pending re-bind; False if there was none."""

    # --- a device's whole record --------------------------------------------------------------

    async def forget_device(self, device_id: str) -> None:
        """Erase what the device said and what was learnt about it: history, facts, memory, profile
        assignment, results held for it, its reminders (and those that fired while it was away),
        its voiceprints, and its identity pin (the next contact pins again); its admission and
        pairings stay: they are the operator's decisions."""
        await self.forget_facts(device_id)
        await self.clear_history(device_id)
        await self.take_results(device_id)
        for reminder in await self.reminders(device_id):
            await self.cancel_reminder(device_id, reminder.id)
        await self.take_fired(device_id)
        await self.set_memory(device_id, "")
        await self.assign_profile(device_id, None)
        await self.clear_voiceprints(device_id)
        await self.unpin_identity(device_id)


def _counting_failures(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`method`, counting the StoreError it raises (once, however many store methods it passes)."""

    @functools.wraps(method)
    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except StoreError as exc:
            if not getattr(exc, "_counted", False):
                exc._counted = True  # type: ignore[attr-defined]
                count_store_error("write" if isinstance(exc, StoreWriteError) else "unavailable")
            raise

    counted._counts_store_errors = True  # type: ignore[attr-defined]
    return counted
