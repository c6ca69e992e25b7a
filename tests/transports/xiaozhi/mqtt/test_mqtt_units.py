"""The MQTT + UDP wing's pure parts: the firmware's audio packet and its sequence rule, the MQTT
3.1.1 packets a device may send (bounded), and the per-device credentials."""

from __future__ import annotations

import asyncio
import struct

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from vixio.transports.xiaozhi.mqtt import packets as mp
from vixio.transports.xiaozhi.mqtt.audio_packets import (
    AudioCipher,
    BadPacket,
    new_nonce,
    parse_header,
)
from vixio.transports.xiaozhi.mqtt.credentials import (
    MqttCredentials,
    device_key,
    device_of_key,
    load_secret,
)

pytestmark = pytest.mark.unit

KEY = bytes(range(16))


def firmware_seal(key: bytes, nonce: bytes, payload: bytes, timestamp: int, sequence: int) -> bytes:
    """`MqttProtocol::SendAudio`, written out from mqtt_protocol.cc: the nonce with length at 2,
    timestamp at 8 and sequence at 12 (network order) is the header and the CTR counter."""
    header = bytearray(nonce)
    header[2:4] = struct.pack("!H", len(payload))
    header[8:12] = struct.pack("!I", timestamp)
    header[12:16] = struct.pack("!I", sequence)
    encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(header))).encryptor()
    return bytes(header) + encryptor.update(payload) + encryptor.finalize()


def test_the_server_reads_the_firmwares_packets_and_the_firmware_reads_the_servers() -> None:
    nonce = new_nonce(0x01020304)
    assert nonce[0] == 0x01 and nonce[4:8] == b"\x01\x02\x03\x04"
    server = AudioCipher(KEY, nonce)
    datagram = firmware_seal(KEY, nonce, b"opus-bytes", 0, 1)
    assert server.open(datagram, parse_header(datagram, 1500)) == b"opus-bytes"
    sent = server.seal(b"downlink", timestamp=7)
    header = parse_header(sent, 1500)
    assert (header.ssrc, header.timestamp, header.sequence) == (0x01020304, 7, 1)
    assert sent == firmware_seal(KEY, nonce, b"downlink", 7, 1)  # what the device decrypts with
    assert server.seal(b"x")[12:16] == b"\x00\x00\x00\x02"


def test_sequences_at_or_below_the_last_accepted_are_refused() -> None:
    nonce = new_nonce(9)
    server = AudioCipher(KEY, nonce)
    packets = [firmware_seal(KEY, nonce, b"p%d" % n, 0, n) for n in (1, 2, 5, 4, 5)]
    outcome = []
    for datagram in packets:
        try:
            outcome.append(server.open(datagram, parse_header(datagram, 1500)))
        except BadPacket as exc:
            outcome.append(exc.reason)
    assert outcome == [b"p1", b"p2", b"p5", "replay", "replay"]  # a gap is taken, as the firmware does


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [
        (b"\x01" * 15, "short"),
        (b"\x02" + bytes(15), "type"),
        (b"\x01\x00\x00\x05" + bytes(12) + b"1234", "length"),
        (b"\x01\x00\x07\xd0" + bytes(12) + bytes(2000), "length"),  # over the bound though consistent
    ],
)
def test_malformed_datagrams_name_why(datagram: bytes, reason: str) -> None:
    with pytest.raises(BadPacket) as caught:
        parse_header(datagram, 1500)
    assert caught.value.reason == reason


def test_credentials_are_bound_to_the_pinned_pair_and_their_own_topics() -> None:
    issuer = MqttCredentials("s" * 32)
    section = issuer.issue("aa:bb:cc:dd:ee:01", "board-uuid", "10.0.0.2:1883", 240)
    assert (
        section["publish_topic"] == "vixio/aabbccddee01/up" and section["subscribe_topic"] == "vixio/aabbccddee01/down"
    )
    identity = issuer.check(str(section["client_id"]), str(section["username"]), str(section["password"]))
    assert identity is not None and (identity.device_id, identity.client_id) == ("aa:bb:cc:dd:ee:01", "board-uuid")
    assert issuer.check("aa:bb:cc:dd:ee:01|another-board", str(section["username"]), str(section["password"])) is None
    assert issuer.check(str(section["client_id"]), "aabbccddee02", str(section["password"])) is None
    assert (
        MqttCredentials("t" * 32).check(str(section["client_id"]), str(section["username"]), str(section["password"]))
        is None
    )
    assert issuer.check("x" * 500, "", "") is None


@pytest.mark.parametrize("device_id", ["aa:bb:cc:dd:ee:01", "aa:bb:cc:dd:ee:01~3b0c44298f", "desk-lamp"])
def test_device_keys_are_topic_safe_and_reversible(device_id: str) -> None:
    key = device_key(device_id)
    assert not set(key) & set("+#/") and device_of_key(key) == device_id
    assert MqttCredentials("s" * 32).device_of_topic(f"vixio/{key}/up") == device_id


def test_the_generated_secret_is_made_once_and_shared(tmp_path) -> None:
    first = load_secret("", tmp_path)
    assert load_secret("", tmp_path) == first and len(first) >= 32
    assert (tmp_path / "mqtt_secret").stat().st_mode & 0o077 == 0
    assert load_secret("configured-secret-123", tmp_path) == "configured-secret-123"


async def read(data: bytes, limit: int = 1024) -> mp.Packet:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await mp.read_packet(reader, limit)


async def test_mqtt_packets_round_trip_and_lengths_are_bounded() -> None:
    body = (
        mp._pack_string("MQTT")
        + bytes([4, 0xC2, 0, 240])
        + mp._pack_string("dev|board")
        + mp._pack_string("user")
        + mp._pack_string("pass")
    )
    packet = await read(mp.encode(mp.CONNECT, 0, body))
    connect = mp.parse_connect(packet.body)
    assert (connect.client_id, connect.username, connect.password, connect.keepalive) == (
        "dev|board",
        "user",
        "pass",
        240,
    )
    publish = await read(mp.publish("a/b/up", b"{}"))
    assert mp.parse_publish(publish.flags, publish.body) == mp.Publish("a/b/up", b"{}", 0, 0)
    with pytest.raises(mp.MalformedPacket, match="limit"):
        await read(mp.encode(mp.PUBLISH, 0, bytes(2000)))
    with pytest.raises(mp.MalformedPacket, match="4 bytes"):
        await read(b"\x30\xff\xff\xff\xff\x01")
    with pytest.raises(mp.MalformedPacket):
        mp.parse_connect(mp._pack_string("MQTT") + bytes([4, 0x80, 0, 1]) + b"\x00")  # client id past the end
    with pytest.raises(mp.MalformedPacket, match="wildcard"):
        mp.parse_publish(0, mp._pack_string("a/#"))
    with pytest.raises(mp.MalformedPacket, match="level"):
        mp.parse_connect(mp._pack_string("MQTT") + bytes([5, 0x02, 0, 1]) + mp._pack_string("x"))
