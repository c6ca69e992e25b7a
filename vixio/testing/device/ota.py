"""The OTA / activation exchange a Xiaozhi device runs at every boot (docs/xiaozhi-protocol.md §1).

The device POSTs its system-info JSON to the OTA URL, reads `websocket{url, token,
version}` from the reply and, if the reply carries `activation`, polls
`<ota_url>/activate` until the server answers 200. A reply with `mqtt`, or with neither
`mqtt` nor `websocket`, sends a real device to MQTT, so here it is an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from vixio.testing.device.errors import OtaError

ACTIVATION_MAX_ATTEMPTS = 10
"""The firmware polls /activate (and re-runs the OTA check) at most 10 times."""


@dataclass
class DeviceIdentity:
    """What the device reports about itself in OTA headers and body."""

    device_id: str
    client_id: str
    board: str
    firmware_version: str
    language: str = "zh-CN"


@dataclass
class OtaResult:
    """What the device kept from the OTA exchange."""

    reply: dict[str, Any]
    """The last OTA reply body."""
    websocket_url: str
    token: str | None
    """`websocket.token`; the `Bearer ` prefix is added at connect time when it has no space.
    None when the reply omits it: the device keeps the token it had stored."""
    protocol_version: int | None
    """`websocket.version` when it was 1, 2 or 3; None keeps the device's own."""
    activation_code: str | None = None
    activation_polls: int = 0
    """POSTs to /activate (0 when the server asked for no activation)."""
    warnings: list[str] = field(default_factory=list)
    mqtt: dict[str, Any] | None = None
    """The reply's `mqtt` object, for a device that speaks MQTT + UDP (`run_ota(mqtt=True)`)."""


def random_device_id() -> str:
    """A random lowercase MAC (locally administered, unicast), e.g. `06:1f:a2:...`."""
    octets = [random.randrange(256) for _ in range(6)]
    octets[0] = (octets[0] & 0xFC) | 0x02
    return ":".join(f"{o:02x}" for o in octets)


def board_client_id(device_id: str) -> str:
    """The Client-Id a simulated board keeps in flash: a UUID v4 like the firmware's, the same for the
    same MAC in every run (the firmware keeps it across reboots and updates), so a reconnecting
    board is the same device."""
    digest = hashlib.sha256(f"vixio-simulated-board:{device_id}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def system_info(identity: DeviceIdentity) -> dict[str, Any]:
    """The OTA body, shaped like `Board::GetSystemInfoJson()` of a bread-compact-wifi board."""
    mac = identity.device_id
    return {
        "version": 2,
        "language": identity.language,
        "flash_size": 16777216,
        # The firmware sends this one as a string; servers must parse leniently.
        "minimum_free_heap_size": "123456",
        "mac_address": mac,
        "uuid": identity.client_id,
        "chip_model_name": "esp32s3",
        "chip_info": {"model": 9, "cores": 2, "revision": 2, "features": 18},
        "application": {
            "name": "xiaozhi",
            "version": identity.firmware_version,
            "compile_time": "Aug  8 2026T08:33:45Z",
            "idf_version": "v5.4.1",
            "elf_sha256": "0" * 64,
        },
        "partition_table": [
            {"label": "nvs", "type": 1, "subtype": 2, "address": 36864, "size": 16384},
            {"label": "ota_0", "type": 0, "subtype": 16, "address": 1048576, "size": 4128768},
        ],
        "ota": {"label": "ota_0"},
        "display": {"monochrome": False, "width": 240, "height": 240},
        "board": {
            "type": identity.board,
            "name": identity.board,
            "ssid": "vixio-sim",
            "rssi": -55,
            "channel": 6,
            "ip": "127.0.0.1",
            "mac": mac,
        },
    }


def ota_headers(identity: DeviceIdentity) -> dict[str, str]:
    """Headers of `Ota::SetupHttp` for a device without an eFuse serial number."""
    return {
        "Activation-Version": "1",
        "Device-Id": identity.device_id,
        "Client-Id": identity.client_id,
        "User-Agent": f"{identity.board}/{identity.firmware_version}",
        "Accept-Language": identity.language,
        "Content-Type": "application/json",
    }


def activate_url(ota_url: str) -> str:
    """`<ota_url>/activate`, without doubling the slash."""
    return ota_url + ("activate" if ota_url.endswith("/") else "/activate")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


async def run_ota(
    ota_url: str,
    identity: DeviceIdentity,
    *,
    poll_interval: float = 3.0,
    error_interval: float = 10.0,
    max_attempts: int = ACTIVATION_MAX_ATTEMPTS,
    http_timeout: float = 10.0,
    mqtt: bool = False,
) -> OtaResult:
    """POST the OTA check, run activation if asked, and return the WebSocket settings.

    `poll_interval` is the wait after /activate answers 202 (3 s on a device);
    `error_interval` the wait after any other status, or before re-checking OTA when the
    activation has no `challenge` (10 s on a device). Raises OtaError for anything a
    real device could not turn into a WebSocket connection.
    """
    import aiohttp  # the `xiaozhi` extra

    log = logger.bind(component="SimulatedDevice", device=identity.device_id)
    headers = ota_headers(identity)
    body = json.dumps(system_info(identity), ensure_ascii=False)
    timeout = aiohttp.ClientTimeout(total=http_timeout)
    polls = 0
    code: str | None = None
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for _ in range(max_attempts):
            reply = await _post_ota(http, ota_url, headers, body)
            activation = reply.get("activation")
            if not isinstance(activation, dict) or not ({"code", "challenge"} & activation.keys()):
                break
            code = str(activation.get("code")) if activation.get("code") is not None else code
            log.info("OTA asks for activation (code {}): {}", code, activation.get("message", ""))
            if "challenge" not in activation:
                # Activate() fails at once without a challenge; the firmware re-checks OTA later.
                log.warning("activation without `challenge`: a real device re-checks OTA after {} s", error_interval)
                await asyncio.sleep(error_interval)
                continue
            polls += await _poll_activation(http, ota_url, headers, poll_interval, error_interval, max_attempts, log)
            # Like the firmware: after activation the OTA check runs again, and its reply (with
            # the token a server gives only to activated devices) is the one kept.
        else:
            raise OtaError(f"OTA at {ota_url} still asks for activation after {max_attempts} checks")
    if mqtt:
        return _mqtt_settings(ota_url, reply, code, polls)
    return _websocket_settings(ota_url, reply, identity, code, polls)


MQTT_KEYS = ("endpoint", "client_id", "username", "password", "publish_topic")


def _mqtt_settings(ota_url: str, reply: dict[str, Any], code: str | None, polls: int) -> OtaResult:
    """What firmware's MQTT path keeps (`Ota::CheckVersion` stores every string/number of `mqtt`)."""
    section = reply.get("mqtt")
    if not isinstance(section, dict):
        raise OtaError(
            f"OTA reply from {ota_url} has no `mqtt` object (keys {sorted(reply)}): this device "
            "was asked to speak MQTT; is `mqtt.enabled` set on the server?"
        )
    missing = [key for key in MQTT_KEYS if not isinstance(section.get(key), str) or not section[key]]
    if missing:
        raise OtaError(f"OTA reply `mqtt` lacks {missing}; the firmware cannot connect without them")
    websocket = reply.get("websocket")
    url = websocket.get("url") if isinstance(websocket, dict) else None
    url = url if isinstance(url, str) else ""
    return OtaResult(
        reply=reply,
        websocket_url=url,
        token=None,
        protocol_version=None,
        activation_code=code,
        activation_polls=polls,
        mqtt=section,
    )


async def _post_ota(http: Any, url: str, headers: dict[str, str], body: str) -> dict[str, Any]:
    try:
        async with http.post(url, data=body.encode(), headers=headers) as response:
            text = await response.text()
            status = response.status
    except Exception as exc:
        raise OtaError(f"OTA POST {url} failed: {exc!r}") from exc
    if status != 200:
        raise OtaError(f"OTA POST {url} answered HTTP {status} (the device needs 200): {text[:200]!r}")
    try:
        reply = json.loads(text)
    except ValueError as exc:
        raise OtaError(f"OTA reply from {url} is not JSON: {text[:200]!r}") from exc
    if not isinstance(reply, dict):
        raise OtaError(f"OTA reply from {url} is not a JSON object: {text[:200]!r}")
    return reply


async def _poll_activation(
    http: Any,
    ota_url: str,
    headers: dict[str, str],
    poll_interval: float,
    error_interval: float,
    max_attempts: int,
    log: Any,
) -> int:
    """POST /activate until 200; returns the number of POSTs. Body `{}`: no serial number."""
    url = activate_url(ota_url)
    for attempt in range(1, max_attempts + 1):
        try:
            async with http.post(url, data=b"{}", headers=headers) as response:
                status = response.status
        except Exception as exc:
            raise OtaError(f"activation POST {url} failed: {exc!r}") from exc
        if status == 200:
            log.info("activated after {} poll(s)", attempt)
            return attempt
        wait = poll_interval if status == 202 else error_interval
        log.info("activation answered HTTP {}; retrying in {} s", status, wait)
        await asyncio.sleep(wait)
    raise OtaError(f"{url} did not answer 200 after {max_attempts} polls (202 means 'not yet')")


def _websocket_settings(
    ota_url: str, reply: dict[str, Any], identity: DeviceIdentity, code: str | None, polls: int
) -> OtaResult:
    if "mqtt" in reply:
        raise OtaError(
            f"OTA reply from {ota_url} contains `mqtt`: a real device would switch to MQTT+UDP "
            "and never open the WebSocket; leave `mqtt` out"
        )
    websocket = reply.get("websocket")
    if not isinstance(websocket, dict):
        raise OtaError(
            f"OTA reply from {ota_url} has no `websocket` object: a real device defaults to MQTT; "
            f"got keys {sorted(reply)}"
        )
    url = websocket.get("url")
    if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
        raise OtaError(f"OTA reply `websocket.url` must be a ws:// or wss:// string, got {url!r}")
    token = websocket.get("token")
    if token is not None and not isinstance(token, str):
        raise OtaError(f"OTA reply `websocket.token` must be a string, got {token!r}")
    version = websocket.get("version")
    protocol_version = version if isinstance(version, int) and version in (1, 2, 3) else None
    warnings = []
    firmware = reply.get("firmware")
    if isinstance(firmware, dict) and isinstance(firmware.get("version"), str):
        newer = _version_tuple(firmware["version"]) > _version_tuple(identity.firmware_version)
        if newer or firmware.get("force") == 1:
            warnings.append(
                f"OTA offers firmware {firmware['version']} (url {firmware.get('url')!r}); "
                f"a real device on {identity.firmware_version} would try to upgrade and reboot"
            )
    return OtaResult(
        reply=reply,
        websocket_url=url,
        token=token,
        protocol_version=protocol_version,
        activation_code=code,
        activation_polls=polls,
        warnings=warnings,
    )
