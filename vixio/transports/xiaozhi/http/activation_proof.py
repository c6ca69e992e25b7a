"""Activation v2: a device proves that it holds the key burnt into its eFuse.

Firmware with a serial number in eFuse (78/xiaozhi-esp32, main/ota.cc) sends
`Activation-Version: 2` and `Serial-Number: <serial>` with its OTA request, and polls
`<ota url>/activate` with

    {"algorithm": "hmac-sha256", "serial_number": "<serial>", "challenge": "<the OTA reply's>",
     "hmac": "<64 lowercase hex digits>"}

where `hmac` is HMAC-SHA256 over the challenge's bytes exactly as the OTA reply gave them, keyed
with the 32-byte key in the chip's eFuse key block KEY0 (`esp_hmac_calculate(HMAC_KEY0, ...)`).
The firmware reads HTTP 200 as activated, 202 as "poll again in 3 s", anything else as a failure
(it polls again after 10 s, ten times, then asks OTA for a new challenge). A chip without the
HMAC peripheral sends an empty `hmac`, and firmware without a serial number sends `{}`: both are
left to the operator's code.

The keys are the owner's (`xiaozhi.activation.device_keys`, `device_keys_file`); they are never
logged or shown, only their count.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ALGORITHM = "hmac-sha256"
MAX_SERIAL_CHARS = 64
"""The firmware's serial is at most 32 characters (one eFuse block of user data)."""
MAX_CHALLENGE_CHARS = 128
"""vixio's challenges are 32 hex digits; longer ones were not issued here."""

RefusalKind = Literal["malformed", "unknown_serial", "not_issued", "used", "bad_hmac", "rate", "full"]


class ActivationRefused(Exception):
    """A request activation cannot serve; `message` is for the device's log, `status` its HTTP status."""

    def __init__(self, kind: RefusalKind, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status


def parse_key(value: str, where: str) -> bytes:
    """A device key as written in config: 64 hex digits (the eFuse key block's 256 bits).
    The error names `where` (the serial number, or file and line), never the value."""
    text = value.strip().lower()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ValueError(f"{where}: a device key must be 64 hex digits (the 32-byte eFuse HMAC key)")
    return key


def check_serial(serial: str, where: str) -> str:
    if not serial or len(serial) > MAX_SERIAL_CHARS or not serial.isprintable():
        raise ValueError(f"{where}: a serial number must be 1-{MAX_SERIAL_CHARS} printable characters")
    return serial


class DeviceKeys:
    """Serial number → the device's eFuse HMAC key; its repr shows only how many there are."""

    def __init__(self, keys: Mapping[str, bytes] | None = None) -> None:
        self._keys = dict(keys or {})

    @classmethod
    def load(cls, inline: Mapping[str, str], path: str | None) -> DeviceKeys:
        """`device_keys` from config, then the lines of `device_keys_file`: `<serial> <key>`
        (whitespace or one comma between them), blank lines and `#` comments skipped."""
        keys = {
            check_serial(serial, f"xiaozhi.activation.device_keys[{serial!r}]"): parse_key(
                value, f"xiaozhi.activation.device_keys[{serial!r}]"
            )
            for serial, value in inline.items()
        }
        if path:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"xiaozhi.activation.device_keys_file {path}: unreadable ({exc})") from exc
            for number, line in enumerate(text.splitlines(), 1):
                fields = line.split("#", 1)[0].replace(",", " ").split()
                if not fields:
                    continue
                where = f"xiaozhi.activation.device_keys_file {path}, line {number}"
                if len(fields) != 2:
                    raise ValueError(f"{where}: expected '<serial number> <64 hex digits>'")
                keys[check_serial(fields[0], where)] = parse_key(fields[1], where)
        return cls(keys)

    def get(self, serial: str) -> bytes | None:
        return self._keys.get(serial)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"DeviceKeys({len(self._keys)} keys)"


@dataclass(frozen=True, slots=True)
class DeviceProof:
    """What an activation v2 poll claims: this serial's key signed this challenge."""

    serial_number: str
    challenge: str
    hmac: str
    """64 lowercase hex digits."""

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> DeviceProof | None:
        """The proof in an /activate body; None when it offers none (`{}`, or an empty `hmac`
        from a chip without the HMAC peripheral). Malformed fields are refused (HTTP 400)."""
        serial, challenge, mac = body.get("serial_number"), body.get("challenge"), body.get("hmac")
        if not mac or not serial:
            return None
        algorithm = body.get("algorithm", ALGORITHM)
        if algorithm != ALGORITHM:
            raise ActivationRefused(
                "malformed",
                f"activation algorithm {str(algorithm)[:32]!r} is not supported; expected {ALGORITHM!r}",
                400,
            )
        if not isinstance(serial, str) or not serial or len(serial) > MAX_SERIAL_CHARS or not serial.isprintable():
            raise ActivationRefused(
                "malformed", f"serial_number must be 1-{MAX_SERIAL_CHARS} printable characters", 400
            )
        if not isinstance(challenge, str) or not challenge or len(challenge) > MAX_CHALLENGE_CHARS:
            raise ActivationRefused(
                "malformed", f"challenge must be the OTA reply's (1-{MAX_CHALLENGE_CHARS} characters)", 400
            )
        text = mac.lower() if isinstance(mac, str) else ""
        if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
            raise ActivationRefused("malformed", "hmac must be 64 hex digits (HMAC-SHA256 of the challenge)", 400)
        return cls(serial, challenge, text)

    def verifies(self, key: bytes) -> bool:
        """Whether `hmac` is HMAC-SHA256(key, challenge), compared in constant time."""
        expected = hmac.new(key, self.challenge.encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.hmac)
