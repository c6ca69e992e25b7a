"""Device tokens and the WebSocket handshake identity of a Xiaozhi device.

The token wire format matches existing Xiaozhi deployments so tokens they issued keep working:

    base64url_nopad(HMAC-SHA256(secret, "<client_id>|<device_id>|<unix_ts>")) + "." + "<unix_ts>"

OTA hands the token out; the device stores it and sends `Authorization: Bearer <token>` on every
WebSocket handshake together with `Device-Id`, `Client-Id` and `Protocol-Version`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from loguru import logger

from vixio.config.xiaozhi import AuthConfig
from vixio.core.device_ids import DeviceIdError, normalize_device_id

FUTURE_SKEW_SECONDS = 60
"""A token may claim to be issued this far in the future (clock steps between servers sharing a secret)."""

_MAX_TIMESTAMP_DIGITS = 12
"""Longer timestamps are malformed; keeps int() of an attacker-sized string cheap."""

MAX_ID_LENGTH = 128
"""Client ids are cut to this length (a UUID is 36 characters); device ids follow vixio/core/device_ids.py."""


class AuthError(Exception):
    """A handshake or token was refused; `reason` says why in words an operator can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        """Why the request was refused."""

    status = 401
    """The HTTP status the handshake is refused with."""


class BadDeviceId(AuthError):
    """The handshake's device id breaks the rule of vixio/core/device_ids.py: refused (HTTP 400)
    whether auth is on or off, never cut to fit."""

    status = 400


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """Who is on the other end of a handshake, as announced in its headers or query."""

    device_id: str
    """Lowercased device id (the firmware sends its STA MAC, `aa:bb:cc:dd:ee:ff`)."""
    client_id: str
    """`Client-Id` (a UUID v4 kept in the device's NVS); "" when not sent."""
    protocol_version: int = 1
    """`Protocol-Version` (binary framing 1, 2 or 3); range checks belong to the transport."""
    token: str = ""
    """Bearer token as sent, without the `Bearer ` prefix; "" when none was sent."""
    claimed: str = ""
    """The Device-Id it claimed when that is pinned to another Client-Id: `device_id` is then its
    own (identity.py); "" otherwise."""
    invented: bool = False
    """`device_id` was made up by the server (an anonymous client sent none): nothing to pin."""


def _signature(secret: str, client_id: str, device_id: str, timestamp: int) -> str:
    message = f"{client_id}|{device_id}|{timestamp}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def issue_token(secret: str, client_id: str, device_id: str, now: float | None = None) -> str:
    """Return a token binding `client_id` and `device_id`, stamped with `now` (default: the clock)."""
    timestamp = int(time.time() if now is None else now)
    return f"{_signature(secret, client_id, device_id, timestamp)}.{timestamp}"


def verify_token(
    secret: str,
    token: str,
    client_id: str,
    device_id: str,
    ttl: float,
    now: float | None = None,
) -> None:
    """Raise `AuthError` unless `token` was issued with `secret` for this client and device within `ttl` s."""
    signature, dot, stamp = token.rpartition(".")
    if not dot or not signature or not (stamp.isascii() and stamp.isdigit()) or len(stamp) > _MAX_TIMESTAMP_DIGITS:
        raise AuthError("malformed token: expected '<signature>.<unix time>'")
    if stamp != str(int(stamp)):
        # One canonical form per token: "0123" and "123" sign the same message.
        raise AuthError("malformed token: the timestamp has leading zeros")
    timestamp = int(stamp)
    # The signature covers the timestamp, so it is checked before the time window: a token whose
    # timestamp was edited reads as "bad signature", not as "expired".
    expected = _signature(secret, client_id, device_id, timestamp)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        raise AuthError("bad signature: token was issued for another device/client id or with another secret")
    current = time.time() if now is None else now
    if timestamp > current + FUTURE_SKEW_SECONDS:
        raise AuthError(f"token issued {timestamp - current:.0f} s in the future; check the server clock")
    age = current - timestamp
    if age > ttl:
        raise AuthError(
            f"token expired {age - ttl:.0f} s ago (valid for {ttl:.0f} s); reboot the device to get a new one"
        )


def _lookup(mapping: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup; works on plain dicts as well as multidicts and `websockets` headers."""
    value = mapping.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, candidate in mapping.items():
        if key.lower() == lowered:
            return candidate
    return None


def parse_bearer(value: str | None) -> str:
    """The token in an `Authorization` value: the `Bearer` scheme is stripped; a bare "Bearer" or no value is ""."""
    value = (value or "").strip()
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == "bearer":
        return rest.strip()
    # The firmware adds "Bearer " itself; a value without a scheme (e.g. a query parameter) is the token.
    return value


class DeviceAuthenticator:
    """Issues tokens for OTA and checks the WebSocket handshake against `AuthConfig`."""

    def __init__(self, config: AuthConfig) -> None:
        self._config = config
        self._allowed = {device.strip().lower() for device in config.allowed_devices}

    @property
    def enabled(self) -> bool:
        """Whether handshakes must carry a valid token."""
        return self._config.enabled

    def is_allowed(self, device_id: str) -> bool:
        """Whether `device_id` is on the allow-list (connects without a token)."""
        return device_id.strip().lower() in self._allowed

    def token_for(self, client_id: str, device_id: str) -> str:
        """Token to hand out through OTA; "" when auth is off or the device is allow-listed."""
        if not self._config.enabled or self.is_allowed(device_id):
            return ""
        return issue_token(self._config.secret, client_id, device_id.strip().lower())

    def authenticate(self, headers: Mapping[str, str], query: Mapping[str, str]) -> DeviceIdentity:
        """Read the device's identity from handshake headers (query as fallback) and check its token.

        Headers win over query parameters; the query exists because browsers cannot set WebSocket
        headers. Raises `AuthError` when the device id is missing, the protocol version is not an
        integer, or auth is on and the device is neither allow-listed nor holding a valid token.
        """

        def field(header: str, parameter: str) -> str:
            value = _lookup(headers, header)
            if value is None or not value.strip():
                value = _lookup(query, parameter)
            return (value or "").strip()

        device_id = field("Device-Id", "device-id").lower()
        if not device_id:
            raise AuthError("missing Device-Id header (or device-id query parameter)")
        device_id = _checked_device_id(device_id)
        client_id = field("Client-Id", "client-id")
        version_text = field("Protocol-Version", "protocol-version") or "1"
        try:
            protocol_version = int(version_text)
        except ValueError:
            raise AuthError(f"Protocol-Version must be an integer, got {version_text!r}") from None
        token = parse_bearer(field("Authorization", "authorization"))
        identity = DeviceIdentity(device_id, client_id, protocol_version, token)

        if not self._config.enabled or self.is_allowed(device_id):
            return identity
        if not token:
            raise AuthError("missing bearer token (Authorization header); the device gets one from OTA")
        if not client_id:
            raise AuthError("missing Client-Id header (or client-id query parameter); the token is bound to it")
        verify_token(self._config.secret, token, client_id, device_id, self._config.token_ttl)
        logger.bind(device=device_id).debug("token accepted")
        return identity


def anonymous_identity(headers: Mapping[str, str], query: Mapping[str, str]) -> DeviceIdentity:
    """With auth off, a client without ids (a browser page, a test tool) is still served; an id
    that breaks the device id rule is refused (`BadDeviceId`), not cut."""
    lowered = {k.lower(): v for k, v in headers.items()}
    device_id = (lowered.get("device-id") or query.get("device-id") or "").strip().lower()
    if device_id:
        device_id = _checked_device_id(device_id)
    client_id = (lowered.get("client-id") or query.get("client-id") or "").strip()
    version = (lowered.get("protocol-version") or query.get("protocol-version") or "1").strip()
    return DeviceIdentity(
        device_id=device_id or f"anonymous-{uuid.uuid4().hex[:8]}",
        client_id=client_id[:MAX_ID_LENGTH],
        # ASCII digits only: "²".isdigit() is true but int() refuses it.
        protocol_version=int(version) if version.isascii() and version.isdigit() and len(version) <= 3 else 1,
        invented=not device_id,
    )


def _checked_device_id(device_id: str) -> str:
    try:
        return normalize_device_id(device_id, "Device-Id (or device-id query parameter)")
    except DeviceIdError as exc:
        raise BadDeviceId(str(exc)) from None
