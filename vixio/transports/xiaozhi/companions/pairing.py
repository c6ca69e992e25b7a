"""Pairing registerTools companions with the Xiaozhi device of their `mac_addr`.

A companion is a client that speaks only registerTools (docs/tool-systems.md §3) — a robot app, a virtual-human display: it
connects, sends `mcp/registerTools` with `params.mac_addr`, and never sends a Xiaozhi hello or
audio. If it may pair (pairing_policy.py: the device's token, an operator's approval, or
`pairing.trust_mac`) and a Xiaozhi device whose Device-Id is that MAC is connected (now, or
later), the companion is *paired* with the device's session: its tools join that session's tools
(shown as coming from the companion: companion_tools.py) and that session's `mcp/ai/message`
stream is sent to it too. Until then it is served in a session of its own (typed text, no audio)
and told why in the registration result: waiting for the device, or *pending approval* — it
stays connected and is paired the moment an operator approves it (`mcp/pairing` notification).
MACs compare without case or separators (`AA-BB-CC-DD-EE-FF` pairs with `aa:bb:cc:dd:ee:ff`).

The registry lives in the transport (one per process); it only links `RegisterToolsClient`s:
every session has one, and a device session's client (the *host*) carries its companions. With
several workers a companion and its device may be in different processes: the registry's `relay`
(pairing_relay.py) pairs them across, and the host carries a `RemoteCompanion` for it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from loguru import logger

from vixio.transports.xiaozhi.companions.policy import Grant, PairingPolicy
from vixio.transports.xiaozhi.companions.store import MAX_ID_CHARS, CompanionKey, normalize_mac

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.companions.relay import CompanionRelay, RemoteCompanion
    from vixio.transports.xiaozhi.mcp.register_tools import RegisterToolsClient

__all__ = ["CompanionRegistry", "PairingOutcome", "normalize_mac"]

MAX_COMPANIONS_PER_DEVICE = 8
"""Companions one device carries at once; more are served unpaired (a bound on what a client can add)."""

PairingStatus = Literal["paired", "waiting_for_device", "pending_approval", "device_full"]


@dataclass(frozen=True, slots=True)
class PairingOutcome:
    """What a companion's registration led to, as its registration result says it."""

    status: PairingStatus
    message: str
    pairing_id: str = ""

    @property
    def paired(self) -> bool:
        return self.status == "paired"


@dataclass(slots=True)
class _Pending:
    key: CompanionKey
    since: float
    refusal: str


class CompanionRegistry:
    """Live devices by MAC, the companions let in for each MAC, and those awaiting approval."""

    def __init__(self, policy: PairingPolicy | None = None) -> None:
        self.policy = policy
        """None: every companion may pair (the registerTools design's trust in `mac_addr`)."""
        self._hosts: dict[str, RegisterToolsClient] = {}
        """The register client of the live device session of each MAC."""
        self._companions: dict[str, list[RegisterToolsClient]] = {}
        """Companions let in, waiting for or paired with each MAC, oldest first."""
        self._grants: dict[RegisterToolsClient, tuple[CompanionKey, Grant]] = {}
        self._pending: dict[RegisterToolsClient, _Pending] = {}
        self.relay: CompanionRelay | None = None
        """Reaches devices and companions in the other workers (None: one process)."""
        self.pinned_client: Callable[[str], Awaitable[str | None]] | None = None
        """The Client-Id a device id is pinned to (identity.py), which a device token must come with;
        None: no token pairs."""

    # --- devices --------------------------------------------------------------------------------

    def device_connected(self, device_id: str, host: RegisterToolsClient) -> None:
        """A Xiaozhi device said hello: companions waiting for its MAC pair with it now."""
        mac = normalize_mac(device_id)
        if not mac:
            return
        self._hosts[mac] = host
        for companion in self._companions.get(mac, []):
            self._attach(mac, host, companion)
        if self.relay is not None:
            self.relay.device_connected(mac)

    def device_disconnected(self, device_id: str, host: RegisterToolsClient) -> None:
        """The device left: its companions wait for it again."""
        mac = normalize_mac(device_id)
        if mac and self._hosts.get(mac) is host:
            del self._hosts[mac]
            for companion in self._companions.get(mac, []):
                companion.paired_with = ""
            if self.relay is not None:
                self.relay.device_disconnected(host)

    def host(self, mac_addr: str) -> RegisterToolsClient | None:
        return self._hosts.get(normalize_mac(mac_addr))

    # --- companions -----------------------------------------------------------------------------

    async def registered(self, companion: RegisterToolsClient) -> PairingOutcome | None:
        """`companion_registered`, then, if its device is not in this process, pairing through the relay."""
        credential = companion.credential
        if credential.token and self.pinned_client is not None and companion.is_companion:
            spellings = dict.fromkeys([normalize_mac(companion.mac_addr), companion.mac_addr.strip().lower()[:64]])
            pins = [(spelling, await self.pinned_client(spelling)) for spelling in spellings if spelling]
            companion.credential = dataclasses.replace(
                credential, pinned=tuple((spelling, pin) for spelling, pin in pins if pin is not None)
            )
        outcome = self.companion_registered(companion)
        if outcome is not None and outcome.status == "waiting_for_device":
            outcome = await self.pair_elsewhere(companion) or outcome
        return outcome

    async def pair_elsewhere(self, companion: RegisterToolsClient, only: str | None = None) -> PairingOutcome | None:
        """Pair a let-in `companion` whose device is not here with its device in another worker
        (`only` that one); None when none holds it (or there is no relay)."""
        granted = self._grants.get(companion)
        if self.relay is None or granted is None or companion.paired_with:
            return None
        key, grant = granted
        remote = await self.relay.pair(companion, key, only)
        if remote is None:
            return None
        if self._grants.get(companion) is not granted:  # it left or registered again meanwhile
            self.relay.companion_left(companion)
            return None
        if not remote.device_session:
            return self._outcome("device_full", companion, key)
        companion.paired_with = remote.device_session
        logger.bind(session=companion.session_id).info(
            "companion {} paired with device {} in worker {} (session {}; by {})",
            key.companion,
            key.mac,
            remote.worker,
            remote.device_session,
            grant,
        )
        return self._outcome("paired", companion, key)

    def let_in_for(self, mac: str) -> list[RegisterToolsClient]:
        """Companions let in for `mac` (paired, or waiting for the device)."""
        return list(self._companions.get(mac, []))

    def attach_remote(self, mac: str, companion: RemoteCompanion) -> RegisterToolsClient | None:
        """A companion in another worker pairs with the device of `mac` here: its host, or None
        when the device is not here or has all the companions it may."""
        host = self._hosts.get(mac)
        if host is None:
            return None
        for other in list(host.companions):  # the same companion registering again replaces itself
            if other.session_id == companion.session_id:
                host.detach_companion(other)
        if len(host.companions) >= MAX_COMPANIONS_PER_DEVICE:
            logger.bind(session=host.session_id).warning(
                "companion {} (worker {}) not paired: the device has {} companions already",
                companion.device_id,
                companion.link.worker,
                len(host.companions),
            )
            return None
        host.attach_companion(companion)
        return host

    def detach_remote(self, companion: RemoteCompanion) -> None:
        """A companion in another worker left: its tools leave the device here."""
        companion.close()
        for host in self._hosts.values():
            host.detach_companion(companion)

    def companion_registered(self, companion: RegisterToolsClient) -> PairingOutcome | None:
        """`companion` registered (again): pair it if it may and its device is here. None when
        this registration names no other device: the client is no (longer a) companion."""
        mac = normalize_mac(companion.mac_addr)
        self.companion_left(companion)  # a new registration may name another MAC, or none
        if not companion.is_companion:
            return None
        key = CompanionKey(companion.device_id[:MAX_ID_CHARS], companion.client_id[:MAX_ID_CHARS], mac)
        if self.policy is None:
            return self._let_in(companion, key, "trust_mac")
        decision = self.policy.decide(
            key, companion.credential, mac_addr=companion.mac_addr, operator_only=companion.operator_unpaired
        )
        log = logger.bind(session=companion.session_id, device=key.companion)
        if decision.refusal:
            log.warning("companion {} named {} with a token that was refused: {}", key.companion, mac, decision.refusal)
        if decision.grant is None:
            self._pending[companion] = _Pending(key, time.time(), decision.refusal)
            log.info(
                "companion {} asks to pair with {}: pending an operator's approval (pairing id {})",
                key.companion,
                mac,
                key.id,
            )
            return self._pending_outcome(key, decision.refusal)
        return self._let_in(companion, key, decision.grant)

    def companion_left(self, companion: RegisterToolsClient) -> None:
        """The companion disconnected or re-registered: unlink it everywhere."""
        self._pending.pop(companion, None)
        self._grants.pop(companion, None)
        if self.relay is not None:
            self.relay.companion_left(companion)
        for mac, companions in list(self._companions.items()):
            if companion in companions:
                companions.remove(companion)
                host = self._hosts.get(mac)
                if host is not None:
                    host.detach_companion(companion)
            if not companions:
                del self._companions[mac]
        companion.paired_with = ""

    def _let_in(self, companion: RegisterToolsClient, key: CompanionKey, grant: Grant) -> PairingOutcome:
        self._grants[companion] = (key, grant)
        self._companions.setdefault(key.mac, []).append(companion)
        if self.relay is not None:
            self.relay.companion_let_in(companion, key.mac)
        host = self._hosts.get(key.mac)
        if host is None:
            return self._outcome("waiting_for_device", companion, key)
        if not self._attach(key.mac, host, companion):
            return self._outcome("device_full", companion, key)
        return self._outcome("paired", companion, key)

    @staticmethod
    def _outcome(status: PairingStatus, companion: RegisterToolsClient, key: CompanionKey) -> PairingOutcome:
        mac = companion.mac_addr
        message = {
            "waiting_for_device": f"No device {mac} is connected: you are served on your own (send text to talk to "
            "the assistant) until it connects, then you are paired with it.",
            "device_full": f"The device {mac} has {MAX_COMPANIONS_PER_DEVICE} companions already: you are served on "
            "your own.",
            "paired": f"Paired with the device {mac}: its assistant can use these tools and its replies are streamed "
            "to you as mcp/ai/message.",
        }[status]
        return PairingOutcome(status, message, key.id)

    @staticmethod
    def _pending_outcome(key: CompanionKey, refusal: str) -> PairingOutcome:
        why = f" ({refusal})" if refusal else ""
        return PairingOutcome(
            "pending_approval",
            f"Not paired with {key.mac}: pairing awaits an operator's approval"
            f"{why}. Stay connected: you are paired as soon as it is approved (console, or `vixio "
            f"pairing approve {key.id}`) and told so with an mcp/pairing notification; until then "
            "you are served on your own.",
            key.id,
        )

    def _attach(self, mac: str, host: RegisterToolsClient, companion: RegisterToolsClient) -> bool:
        if len(host.companions) >= MAX_COMPANIONS_PER_DEVICE and companion not in host.companions:
            logger.bind(session=companion.session_id).warning(
                "companion for {} not paired: the device has {} companions already", mac, len(host.companions)
            )
            return False
        host.attach_companion(companion)
        companion.paired_with = host.session_id
        grant = self._grants.get(companion, (None, "trust_mac"))[1]
        logger.bind(session=companion.session_id).info(
            "companion {} paired with device {} (session {}; by {})",
            companion.device_id[:MAX_ID_CHARS],
            mac,
            host.session_id,
            grant,
        )
        return True

    # --- the operator ---------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Apply approvals and revocations made since (by this process or another): a pending
        companion now approved pairs, one let in by an approval that was revoked waits again."""
        if self.policy is None:
            return
        for companion, pending in list(self._pending.items()):
            if companion not in self._pending:  # it left while an earlier one paired
                continue
            decision = self.policy.decide(
                pending.key,
                companion.credential,
                mac_addr=companion.mac_addr,
                operator_only=companion.operator_unpaired,
            )
            if decision.grant is not None:
                del self._pending[companion]
                outcome = self._let_in(companion, pending.key, decision.grant)
                if outcome.status == "waiting_for_device":
                    outcome = await self.pair_elsewhere(companion) or outcome
                companion.notify_pairing(outcome)
        for companion, (key, grant) in list(self._grants.items()):
            if grant == "approved" and not self.policy.store.is_approved(key):
                self._wait_for_approval(companion, key)

    def unpair(self, pairing_id: str) -> int:
        """Unpair every live companion with this pairing id: its tools leave the device's agent,
        the device's messages stop; on this connection only an approval pairs it again."""
        count = 0
        for companion, (key, _grant) in list(self._grants.items()):
            if key.id == pairing_id:
                companion.operator_unpaired = True
                self._wait_for_approval(companion, key)
                count += 1
        return count

    def _wait_for_approval(self, companion: RegisterToolsClient, key: CompanionKey) -> None:
        self.companion_left(companion)
        self._pending[companion] = _Pending(key, time.time(), "")
        logger.bind(session=companion.session_id).info(
            "companion {} unpaired from {} by the operator", key.companion, key.mac
        )
        companion.notify_pairing(self._pending_outcome(key, ""))

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """The companions of this process for the console: `pending` approval and let in (`companions`)."""

        def entry(companion: RegisterToolsClient, key: CompanionKey) -> dict[str, Any]:
            return {
                "id": key.id,
                "companion": key.companion,
                "client_id": key.client_id,
                "mac": key.mac,
                "session_id": companion.session_id,
                "tools": [tool.name for tool in companion.tools],
            }

        pending = [
            {**entry(c, p.key), "since": round(p.since, 3), "refusal": p.refusal} for c, p in self._pending.items()
        ]
        companions = [
            {**entry(c, key), "grant": grant, "paired": bool(c.paired_with), "device_session": c.paired_with}
            for c, (key, grant) in self._grants.items()
        ]
        return {"pending": pending, "companions": companions}
