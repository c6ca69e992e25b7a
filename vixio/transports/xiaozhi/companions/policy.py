"""Who may pair a companion with a device (docs/security.md, "Who may pair a companion").

A companion names a device by MAC; a MAC is public (anyone on the LAN sees it), so naming it
proves nothing. A companion is let in by one of:

- `token`: auth is on and the registration carries the device's own credential — the token OTA
  issued to that MAC (`params.token`) with the device's Client-Id (`params.client_id`), which
  the token is bound to and which must be the Client-Id the MAC is pinned to (identity.py): a
  token alone is not proof, OTA once handed one to whoever claimed a MAC;
- `approved`: an operator approved this companion (its Device-Id and Client-Id) for this MAC
  once, in the console or with `vixio pairing approve`; remembered in `PairingStore`;
- `trust_mac`: `xiaozhi.pairing.trust_mac` is on (the registerTools design's behaviour; a WARNING at startup).

Anything else waits for an operator's approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loguru import logger

from vixio.config.xiaozhi import AuthConfig, PairingConfig, XiaozhiConfig
from vixio.transports.xiaozhi.companions.store import CompanionKey, PairingFile, PairingStore
from vixio.transports.xiaozhi.session.auth import AuthError, verify_token

Grant = Literal["token", "approved", "trust_mac"]
"""How a companion was let in."""

MAX_TOKEN_CHARS = 256
"""A longer `params.token` is not a token this server issued (they are ~55 characters)."""


@dataclass(frozen=True, slots=True)
class Credential:
    """What a registration presents for the device it names (`params.token`, `params.client_id`)."""

    token: str = ""
    client_id: str = ""
    pinned: tuple[tuple[str, str], ...] = ()
    """(device id, the Client-Id it is pinned to) of each spelling of the named MAC that has a pin;
    looked up in the store when the registration arrives (CompanionRegistry.registered)."""

    @classmethod
    def from_params(cls, params: dict[str, object]) -> Credential:
        token, client_id = params.get("token"), params.get("client_id")
        return cls(
            token.strip()[:MAX_TOKEN_CHARS] if isinstance(token, str) else "",
            client_id.strip()[:128] if isinstance(client_id, str) else "",
        )


@dataclass(frozen=True, slots=True)
class Decision:
    grant: Grant | None
    """None: the companion waits for an operator."""
    refusal: str = ""
    """Why a presented token was not accepted ("" when none was presented or it was)."""


class PairingPolicy:
    """Decides, from config and the approvals, whether a companion may pair."""

    def __init__(self, auth: AuthConfig, pairing: PairingConfig, store: PairingStore) -> None:
        self.auth = auth
        self.pairing = pairing
        self.store = store

    @classmethod
    def from_config(cls, config: XiaozhiConfig, store: PairingStore | None = None) -> PairingPolicy:
        """`store`: where approvals live (the server passes the state store's); None reads `pairing.state_file`."""
        return cls(config.auth, config.pairing, store if store is not None else PairingFile(config.pairing.state_file))

    def decide(
        self, key: CompanionKey, credential: Credential, *, mac_addr: str = "", operator_only: bool = False
    ) -> Decision:
        """`operator_only`: the operator unpaired this connection, so only an approval lets it back."""
        if self.store.is_approved(key):
            return Decision("approved")
        if operator_only:
            return Decision(None)
        refusal = ""
        if credential.token:
            refusal = self._token_refusal(key, credential, mac_addr)
            if not refusal:
                return Decision("token")
        if self.pairing.trust_mac:
            return Decision("trust_mac", refusal)
        return Decision(None, refusal)

    def _token_refusal(self, key: CompanionKey, credential: Credential, mac_addr: str) -> str:
        if not self.auth.enabled:
            return "auth is off (xiaozhi.auth.enabled), so there is no device token to check"
        if not credential.client_id:
            return "params.client_id is missing: the device's token is bound to its Client-Id"
        # The token names the device id as the device sent it; the firmware sends aa:bb:cc:dd:ee:ff.
        spellings = dict.fromkeys([key.mac, mac_addr.strip().lower()])
        reason = ""
        for device_id in spellings:
            try:
                verify_token(self.auth.secret, credential.token, credential.client_id, device_id, self.auth.token_ttl)
            except AuthError as exc:
                reason = reason or exc.reason
                continue
            pinned = dict(credential.pinned).get(device_id)
            if pinned == credential.client_id:
                return ""
            return (
                f"params.client_id is not the Client-Id {key.mac} is pinned to"
                if pinned is not None
                else f"{key.mac} has no pinned Client-Id to check the token's against"
            ) + ": a token alone is not proof"
        return f"the token is not valid for {key.mac}: {reason}"


def warn_about_trusted_macs(config: XiaozhiConfig) -> None:
    """With `pairing.trust_mac` any client that names a device's MAC reads its conversation."""
    if config.pairing.trust_mac:
        logger.warning(
            "xiaozhi.pairing.trust_mac is on: any client that can reach the WebSocket port and names a "
            "device's MAC in mcp/registerTools is paired with it (reads its conversation, adds tools to "
            "its assistant) without a token or an operator's approval (see docs/security.md)"
        )
