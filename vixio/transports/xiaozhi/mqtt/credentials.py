"""Per-device MQTT credentials: what OTA hands a device, and how the broker checks them.

    client_id  "<device id>|<Client-Id>"        the pinned pair (vixio/transports/xiaozhi/session/identity.py)
    username   "<device key>"                   12 hex digits of the MAC, or "x" + the id in hex
    password   base64url(HMAC-SHA256(secret, "mqtt|" + client_id))[:32]
    topics     "<prefix>/<device key>/up"       the device publishes here (its `publish_topic`)
               "<prefix>/<device key>/down"     what is delivered to it (its `subscribe_topic`)

Nothing is stored: any worker or instance that holds `mqtt.secret` checks a CONNECT by
recomputing the HMAC, and the device key in the username is what an external broker's ACL
pattern (`%u`) matches topics with. OTA issues credentials only to the Client-Id a Device-Id is
pinned to, so a claimant cannot obtain another device's topics.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from vixio.transports.xiaozhi.session.auth import DeviceIdentity

_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
MAX_CLIENT_ID_CHARS = 200
"""A CONNECT client id longer than this is refused before any HMAC (a device id is at most 63, a UUID 36)."""


def device_key(device_id: str) -> str:
    """A topic-safe name of `device_id` (no '+', '#', '/') that gives it back (`device_of_key`)."""
    if _MAC.match(device_id):
        return device_id.replace(":", "")
    return "x" + device_id.encode().hex()


def device_of_key(key: str) -> str | None:
    """The device id a key names, or None for anything `device_key` does not make."""
    if len(key) == 12 and all(c in "0123456789abcdef" for c in key):
        return ":".join(key[i : i + 2] for i in range(0, 12, 2))
    if key.startswith("x") and len(key) <= 2 * MAX_CLIENT_ID_CHARS:
        try:
            return bytes.fromhex(key[1:]).decode()
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class Topics:
    publish: str
    """Where the device publishes (its `publish_topic`)."""
    subscribe: str
    """What is delivered to it (its `subscribe_topic`; it never subscribes itself)."""


class MqttCredentials:
    """Issues and checks the per-device credentials under one secret."""

    def __init__(self, secret: str, prefix: str = "vixio") -> None:
        if not secret:
            raise ValueError("the MQTT credential secret is empty")
        self._secret = secret.encode()
        self.prefix = prefix

    def topics(self, device_id: str) -> Topics:
        key = device_key(device_id)
        return Topics(f"{self.prefix}/{key}/up", f"{self.prefix}/{key}/down")

    def device_of_topic(self, topic: str) -> str | None:
        """The device id of an uplink topic (`<prefix>/<key>/up`), else None."""
        parts = topic.split("/")
        if len(parts) == 3 and parts[0] == self.prefix and parts[2] == "up":
            return device_of_key(parts[1])
        return None

    def _password(self, client_id: str) -> str:
        digest = hmac.new(self._secret, f"mqtt|{client_id}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode()[:32]

    def issue(self, device_id: str, client_id: str, endpoint: str, keepalive: int) -> dict[str, object]:
        """The OTA reply's `mqtt` section for the pinned pair (device_id, client_id)."""
        mqtt_client_id = f"{device_id}|{client_id}"
        topics = self.topics(device_id)
        return {
            "endpoint": endpoint,
            "client_id": mqtt_client_id,
            "username": device_key(device_id),
            "password": self._password(mqtt_client_id),
            "publish_topic": topics.publish,
            "subscribe_topic": topics.subscribe,
            "keepalive": keepalive,
        }

    def check(self, client_id: str, username: str, password: str) -> DeviceIdentity | None:
        """The identity a CONNECT proves, or None when its credentials are not ones issued here."""
        if len(client_id) > MAX_CLIENT_ID_CHARS or "|" not in client_id:
            return None
        device_id, _, board = client_id.partition("|")
        if not device_id or username != device_key(device_id):
            return None
        if not hmac.compare_digest(password.encode(), self._password(client_id).encode()):
            return None
        return DeviceIdentity(device_id=device_id, client_id=board)


def load_secret(configured: str, state_dir: str | Path) -> str:
    """`configured`, else the secret kept in `<state_dir>/mqtt_secret` (made once, mode 0600; the
    first of several workers starting together writes it, the others read it)."""
    if configured:
        return configured
    path = Path(state_dir) / "mqtt_secret"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # another worker created it and is writing its 43 characters
            text = path.read_text().strip()
            if len(text) >= 16:
                return text
            time.sleep(0.02)
        raise RuntimeError(f"{path} holds no MQTT secret; delete it to have a new one made") from None
    secret = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    return secret
