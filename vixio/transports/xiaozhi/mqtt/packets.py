"""MQTT 3.1.1 packets, as much as a broker for Xiaozhi devices needs (OASIS MQTT 3.1.1, section 2-3).

The firmware's client (ESP-IDF esp-mqtt, MQTT 3.1.1 by default) sends CONNECT, PUBLISH (QoS 0
unless a caller asks for more), PINGREQ and DISCONNECT, and never SUBSCRIBE. Every length here
comes from the device, so each is bounded before anything is allocated: the remaining length
by `max_packet`, strings by the packet they sit in.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14

# CONNACK return codes (3.2.2.3)
ACCEPTED, BAD_PROTOCOL, BAD_CLIENT_ID, UNAVAILABLE, BAD_CREDENTIALS, NOT_AUTHORIZED = 0, 1, 2, 3, 4, 5


class MalformedPacket(Exception):
    """The peer broke the protocol; the connection is closed (3.1.1 section 4.8)."""


@dataclass(frozen=True, slots=True)
class Packet:
    kind: int
    flags: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Connect:
    client_id: str
    username: str
    password: str
    keepalive: int
    clean_session: bool


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str
    payload: bytes
    qos: int
    packet_id: int


async def read_packet(reader: asyncio.StreamReader, max_packet: int) -> Packet:
    """The next packet; IncompleteReadError at end of stream, MalformedPacket past `max_packet`."""
    first = (await reader.readexactly(1))[0]
    length, shift = 0, 0
    for _ in range(4):
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    else:
        raise MalformedPacket("remaining length over 4 bytes")
    if length > max_packet:
        raise MalformedPacket(f"packet of {length} bytes (limit {max_packet})")
    return Packet(first >> 4, first & 0x0F, await reader.readexactly(length) if length else b"")


def encode(kind: int, flags: int, body: bytes) -> bytes:
    out = bytearray([kind << 4 | flags])
    length = len(body)
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes(out) + body


def _string(body: bytes, at: int) -> tuple[bytes, int]:
    if at + 2 > len(body):
        raise MalformedPacket("string past the end of the packet")
    (size,) = struct.unpack_from(">H", body, at)
    end = at + 2 + size
    if end > len(body):
        raise MalformedPacket("string past the end of the packet")
    return body[at + 2 : end], end


def _text(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedPacket("a string is not UTF-8") from exc
    if "\0" in text:
        raise MalformedPacket("a string holds U+0000")
    return text


def _pack_string(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">H", len(raw)) + raw


def parse_connect(body: bytes) -> Connect:
    """CONNECT's fields; MalformedPacket for anything but MQTT 3.1.1 (level 4) or 3.1 (level 3)."""
    name, at = _string(body, 0)
    if at + 4 > len(body):
        raise MalformedPacket("CONNECT too short")
    level, flags = body[at], body[at + 1]
    (keepalive,) = struct.unpack_from(">H", body, at + 2)
    if (name, level) not in ((b"MQTT", 4), (b"MQIsdp", 3)) or flags & 0x01:
        raise MalformedPacket(f"unsupported protocol {name[:10]!r} level {level}")
    raw_id, at = _string(body, at + 4)
    if flags & 0x04:  # a will: read past it (a device's will is not delivered anywhere)
        _, at = _string(body, at)
        _, at = _string(body, at)
    username = password = b""
    if flags & 0x80:
        username, at = _string(body, at)
    if flags & 0x40:
        password, at = _string(body, at)
    return Connect(_text(raw_id), _text(username), password.decode("utf-8", "replace"), keepalive, bool(flags & 0x02))


def connack(code: int) -> bytes:
    return encode(CONNACK, 0, bytes([0, code]))


def parse_publish(flags: int, body: bytes) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3")
    raw_topic, at = _string(body, 0)
    packet_id = 0
    if qos:
        if at + 2 > len(body):
            raise MalformedPacket("PUBLISH without its packet id")
        (packet_id,) = struct.unpack_from(">H", body, at)
        at += 2
    topic = _text(raw_topic)
    if not topic or "+" in topic or "#" in topic:
        raise MalformedPacket("PUBLISH to an empty or wildcard topic")
    return Publish(topic, body[at:], qos, packet_id)


def publish(topic: str, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH (what the firmware's handler gets; it asks for nothing more)."""
    return encode(PUBLISH, 0, _pack_string(topic) + payload)


def packet_id_reply(kind: int, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBCOMP or UNSUBACK for `packet_id` (PUBREL carries flags 0b0010)."""
    return encode(kind, 0x02 if kind == PUBREL else 0, struct.pack(">H", packet_id))


def parse_subscribe(body: bytes) -> tuple[int, list[str]]:
    """SUBSCRIBE's packet id and topic filters."""
    if len(body) < 2:
        raise MalformedPacket("SUBSCRIBE too short")
    (packet_id,) = struct.unpack_from(">H", body, 0)
    at, filters = 2, []
    while at < len(body):
        raw, at = _string(body, at)
        at += 1  # requested QoS
        filters.append(_text(raw))
    if not filters or at != len(body):
        raise MalformedPacket("SUBSCRIBE without topic filters")
    return packet_id, filters


def suback(packet_id: int, codes: list[int]) -> bytes:
    return encode(SUBACK, 0, struct.pack(">H", packet_id) + bytes(codes))


PINGRESP_BYTES = encode(PINGRESP, 0, b"")
