"""The firmware's encrypted UDP audio packets (78/xiaozhi-esp32 `main/protocols/mqtt_protocol.cc`).

    |type 1|flags 1|payload_len 2|ssrc 4|timestamp 4|sequence 4|  payload (AES-128-CTR)
     0x01                big-endian        big-endian  big-endian

The 16-byte header is the server's nonce with `payload_len`, `timestamp` and `sequence` written
into it, and the whole header is the AES-CTR initial counter block. The nonce's first byte
becomes every packet's type byte, and the device drops any packet whose type is not 0x01, so
the server's nonce starts with 0x01. Its bytes 4-7 (the `ssrc`) travel unchanged in every
uplink packet: vixio makes them unique per session and finds a packet's session by them.

A receiver drops a packet whose sequence is not above the last one accepted (the device does;
so does vixio). CTR has no integrity check: a packet under the wrong key decrypts to noise, which
only the Opus decoder notices. What binds a packet to its session is the ssrc, the sequence and
the sender's address (udp.py).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

HEADER = struct.Struct(">BBHIII")
"""type, flags, payload_len, ssrc, timestamp, sequence."""
HEADER_BYTES = HEADER.size
PACKET_TYPE = 0x01
SEQUENCE_MAX = 0xFFFFFFFF


class BadPacket(Exception):
    """A datagram that is not one of the firmware's audio packets; `reason` is the metric label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Header:
    payload_len: int
    ssrc: int
    timestamp: int
    sequence: int


def parse_header(datagram: bytes, max_payload: int) -> Header:
    """The header of `datagram`, checked as the firmware checks it (size, type, length)."""
    if len(datagram) < HEADER_BYTES:
        raise BadPacket("short")
    kind, _flags, length, ssrc, timestamp, sequence = HEADER.unpack_from(datagram)
    if kind != PACKET_TYPE:
        raise BadPacket("type")
    if length != len(datagram) - HEADER_BYTES or length > max_payload:
        raise BadPacket("length")
    return Header(length, ssrc, timestamp, sequence)


def new_key() -> bytes:
    return os.urandom(16)


def new_nonce(ssrc: int) -> bytes:
    """A session's nonce: type 0x01, then the ssrc at bytes 4-7; the rest is filled per packet."""
    return HEADER.pack(PACKET_TYPE, 0, 0, ssrc, 0, 0)


def crypt(key: bytes, counter_block: bytes, data: bytes) -> bytes:
    """AES-128-CTR of `data` from `counter_block` (encrypting and decrypting are the same)."""
    cryptor = Cipher(algorithms.AES(key), modes.CTR(counter_block)).encryptor()
    return cryptor.update(data) + cryptor.finalize()


@dataclass(slots=True)
class AudioCipher:
    """One session's key and nonce, its downlink sequence and its uplink replay guard."""

    key: bytes
    nonce: bytes
    sent: int = 0
    """Sequence of the last packet sent (the firmware starts its own at 1)."""
    received: int = 0
    """Highest sequence accepted; a packet at or below it is a replay or arrived late."""

    def __post_init__(self) -> None:
        if len(self.key) != 16 or len(self.nonce) != HEADER_BYTES:
            raise ValueError("AES-128 key and nonce must be 16 bytes each")

    @property
    def ssrc(self) -> int:
        return int.from_bytes(self.nonce[4:8], "big")

    def seal(self, payload: bytes, timestamp: int = 0) -> bytes:
        """One downlink packet for `payload` (the next sequence number)."""
        if len(payload) > 0xFFFF:
            raise ValueError("payload over 65535 bytes")
        self.sent = (self.sent + 1) & SEQUENCE_MAX
        header = bytearray(self.nonce)
        struct.pack_into(">H", header, 2, len(payload))
        struct.pack_into(">II", header, 8, timestamp & SEQUENCE_MAX, self.sent)
        return bytes(header) + crypt(self.key, bytes(header), payload)

    def open(self, datagram: bytes, header: Header) -> bytes:
        """The payload of an uplink packet whose header parsed; BadPacket("replay") when its
        sequence is not above the last accepted (a replay, a duplicate or a reordered packet)."""
        if header.sequence <= self.received:
            raise BadPacket("replay")
        payload = crypt(self.key, datagram[:HEADER_BYTES], datagram[HEADER_BYTES:])
        self.received = header.sequence
        return payload
