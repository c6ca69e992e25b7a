"""Activation v2 over real HTTP: a device proves with its eFuse key that it is one of the owner's.

The device side is built the way 78/xiaozhi-esp32 main/ota.cc builds it: the OTA request and the
/activate poll carry `Activation-Version: 2` and `Serial-Number`, and the poll's body is
`{"algorithm":"hmac-sha256","serial_number":...,"challenge":...,"hmac":...}` (cJSON, unformatted)
with `hmac` the lowercase hex of HMAC-SHA256(eFuse KEY0, the challenge's bytes).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from loguru import logger

from vixio.config.xiaozhi import ActivationConfig
from vixio.state.sqlite import SqliteStore
from vixio.transports.xiaozhi.http.activation import ActivationRegistry
from vixio.transports.xiaozhi.http.ota import OtaServer

from .test_ota import CLIENT, DEVICE, HEADERS, SYSTEM_INFO, StartServer, http, start_server, store  # noqa: F401

pytestmark = pytest.mark.integration

SERIAL = "SN-XZ-2026-0000000000000000000001"  # 32 characters, one eFuse block of user data
KEY = bytes(range(32))  # the 256-bit key burnt into eFuse KEY0
OTHER_SERIAL, OTHER_KEY = "SN-XZ-2026-0000000000000000000002", bytes(range(100, 132))
V2_HEADERS = {**HEADERS, "Activation-Version": "2", "Serial-Number": SERIAL}


def firmware_payload(challenge: str, *, serial: str = SERIAL, key: bytes = KEY) -> str:
    """Ota::GetActivationPayload: esp_hmac_calculate(HMAC_KEY0, challenge.data(), challenge.size()),
    each byte printed "%02x", in a cJSON object printed unformatted."""
    digest = hmac.new(key, challenge.encode(), hashlib.sha256).hexdigest()
    return json.dumps(
        {"algorithm": "hmac-sha256", "serial_number": serial, "challenge": challenge, "hmac": digest},
        separators=(",", ":"),
    )


@pytest.fixture
def lines() -> Iterator[list[tuple[str, str]]]:
    """(level, message) of every line vixio logs during the test."""
    records: list[tuple[str, str]] = []
    sink = logger.add(lambda m: records.append((m.record["level"].name, m.record["message"])), level="DEBUG")
    yield records
    logger.remove(sink)


def keyed(**extra: Any) -> dict[str, Any]:
    return {"enabled": True, "device_keys": {SERIAL: KEY.hex(), OTHER_SERIAL: OTHER_KEY.hex().upper()}, **extra}


async def ota(http: aiohttp.ClientSession, server: OtaServer, headers: dict[str, str] = V2_HEADERS) -> dict[str, Any]:
    async with http.post(server.url, headers=headers, data=json.dumps(SYSTEM_INFO)) as response:
        assert response.status == 200
        return await response.json()


async def activate(
    http: aiohttp.ClientSession, server: OtaServer, body: str, headers: dict[str, str] = V2_HEADERS
) -> tuple[int, dict[str, Any]]:
    async with http.post(server.url + "activate", headers=headers, data=body) as response:
        return response.status, await response.json()


async def test_a_device_that_signs_our_challenge_with_its_key_is_confirmed_without_an_operator(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore, lines: list[tuple[str, str]]
) -> None:
    server = await start_server(activation=keyed(), auth={"enabled": True, "secret": "s3cret"})
    first = await ota(http, server)
    assert first["websocket"]["token"] == ""  # not let in yet
    challenge = first["activation"]["challenge"]

    status, reply = await activate(http, server, firmware_payload(challenge))
    assert (status, reply) == (200, {"status": "activated"})
    assert [(a.device_id, a.via) for a in await store.admissions()] == [(DEVICE, "activation")]
    after = await ota(http, server)
    assert "activation" not in after and after["websocket"]["token"]  # the firmware's next OTA: its token
    assert [m for level, m in lines if "activated by the eFuse key" in m] == [
        f"device {DEVICE} activated by the eFuse key of serial number {SERIAL}"
    ]
    everything = "\n".join(m for _, m in lines)
    assert KEY.hex() not in everything and OTHER_KEY.hex() not in everything.lower()
    assert KEY.hex() not in repr(server._config)  # noqa: SLF001 - the config's repr must not carry keys


async def test_bad_proofs_are_refused_with_a_reason_and_one_line_each(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore, lines: list[tuple[str, str]]
) -> None:
    server = await start_server(activation=keyed())
    challenge = (await ota(http, server))["activation"]["challenge"]
    other_device = {**V2_HEADERS, "Device-Id": "11:22:33:44:55:66"}
    others_challenge = (await ota(http, server, other_device))["activation"]["challenge"]

    refusals = [
        (firmware_payload(challenge, key=OTHER_KEY), "does not verify with the key of serial number"),
        (firmware_payload(challenge, serial="SN-NOT-OURS"), "'SN-NOT-OURS' has no key"),
        (firmware_payload(others_challenge), "was not issued to this device"),
        (firmware_payload("f" * 32), "was not issued to this device"),
    ]
    for body, reason in refusals:
        before = len(lines)
        status, reply = await activate(http, server, body)
        assert status == 403 and reason in reply["error"], (reason, reply)
        warnings = [m for level, m in lines[before:] if level == "WARNING"]
        assert len(warnings) == 1 and reason in warnings[0], warnings
    assert await store.admissions() == []

    # The right proof still works after the wrong ones, and its challenge is then used up: a replay
    # (here after the owner revoked the device) is refused, not a second admission.
    status, _ = await activate(http, server, firmware_payload(challenge))
    assert status == 200
    assert await store.revoke(DEVICE)
    status, reply = await activate(http, server, firmware_payload(challenge))
    assert status == 403 and "already used" in reply["error"]
    assert await store.admissions() == []

    status, reply = await activate(http, server, '{"algorithm":"rsa","serial_number":"x","challenge":"y","hmac":"z"}')
    assert status == 400 and "'rsa' is not supported" in reply["error"]


async def test_a_refused_proof_leaves_the_operators_code_working(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore
) -> None:
    server = await start_server(activation=keyed())
    offer = (await ota(http, server))["activation"]
    status, _ = await activate(http, server, firmware_payload(offer["challenge"], serial="SN-UNLISTED"))
    assert status == 403
    async with http.post(server.url + "activate/confirm", json={"code": offer["code"]}) as response:
        assert response.status == 200
    status, reply = await activate(http, server, firmware_payload(offer["challenge"], serial="SN-UNLISTED"))
    assert (status, reply) == (200, {"status": "activated"})  # confirmed: the firmware's poll ends


async def test_without_keys_the_operator_confirms_as_before(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore
) -> None:
    server = await start_server(activation={"enabled": True})
    challenge = (await ota(http, server))["activation"]["challenge"]
    status, reply = await activate(http, server, firmware_payload(challenge))
    assert status == 202 and reply["status"] == "pending"
    assert await store.admissions() == []


async def test_firmware_without_a_serial_number_waits_for_its_code(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore
) -> None:
    server = await start_server(activation=keyed())
    await ota(http, server, HEADERS)
    status, _ = await activate(http, server, "{}", HEADERS)  # Activation-Version 1 posts {}
    assert status == 202
    no_hmac = json.dumps({"algorithm": "hmac-sha256", "serial_number": SERIAL, "challenge": "c", "hmac": ""})
    status, _ = await activate(http, server, no_hmac)  # a chip without the HMAC peripheral
    assert status == 202


async def test_keys_from_a_file(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore, tmp_path: Path
) -> None:
    keys = tmp_path / "device-keys.txt"
    keys.write_text(f"# serial, key\n\n{SERIAL} {KEY.hex()}\n{OTHER_SERIAL},{OTHER_KEY.hex()}  # the spare\n")
    server = await start_server(activation={"enabled": True, "device_keys_file": str(keys)})
    challenge = (await ota(http, server))["activation"]["challenge"]
    status, _ = await activate(http, server, firmware_payload(challenge))
    assert status == 200


def test_a_bad_key_is_named_by_its_place_never_shown(tmp_path: Path) -> None:
    secret_looking = "ab" * 31  # 62 hex digits: one byte short
    with pytest.raises(ValueError, match=r"device_keys\['SN-1'\]: a device key must be 64 hex digits") as info:
        ActivationRegistry(ActivationConfig(enabled=True, device_keys={"SN-1": secret_looking}), store=None)  # type: ignore[arg-type]
    assert secret_looking not in str(info.value)
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{SERIAL} {KEY.hex()}\nSN-2 {secret_looking}\n")
    with pytest.raises(ValueError, match=r"keys.txt, line 2: a device key must be 64 hex digits") as info:
        ActivationRegistry(ActivationConfig(enabled=True, device_keys_file=str(keys)), store=None)  # type: ignore[arg-type]
    assert secret_looking not in str(info.value)


async def test_a_proof_pins_the_mac_to_the_proving_board_even_after_a_claimant_came_first(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore, lines: list[tuple[str, str]]
) -> None:
    # Trust on first contact gives the MAC to whoever asks first; the eFuse key is stronger proof.
    server = await start_server(activation=keyed(), auth={"enabled": True, "secret": "s3cret"})
    claimant = {**V2_HEADERS, "Client-Id": "att-client"}
    await ota(http, server, claimant)  # the attacker reaches the server before the board does
    assert (await store.identity_pin(DEVICE)).client_id == "att-client"

    challenge = (await ota(http, server))["activation"]["challenge"]
    status, reply = await activate(http, server, firmware_payload(challenge))
    assert (status, reply) == (200, {"status": "activated"})
    assert (await store.identity_pin(DEVICE)).client_id == CLIENT
    assert (await ota(http, server))["websocket"]["token"]  # the board's next OTA gets its token
    assert (await ota(http, server, claimant))["websocket"]["token"] == ""  # the claimant none
    assert [m for _, m in lines if "pinned to it" in m] == [
        f"device {DEVICE} proved its eFuse key with Client-Id {CLIENT!r}: pinned to it (it was pinned to another)"
    ]


async def test_a_refused_proof_moves_no_pin(
    start_server: StartServer, http: aiohttp.ClientSession, store: SqliteStore
) -> None:
    server = await start_server(activation=keyed(), auth={"enabled": True, "secret": "s3cret"})
    await ota(http, server)  # the board pins first
    claimant = {**V2_HEADERS, "Client-Id": "att-client"}
    challenge = (await ota(http, server, claimant))["activation"]["challenge"]
    status, _ = await activate(http, server, firmware_payload(challenge, key=OTHER_KEY), claimant)
    assert status == 403
    assert (await store.identity_pin(DEVICE)).client_id == CLIENT
