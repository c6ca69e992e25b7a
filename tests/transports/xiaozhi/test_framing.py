"""Binary frame packing for Xiaozhi protocol versions 1, 2 and 3."""

from __future__ import annotations

import random
import struct

import pytest

from vixio.transports.xiaozhi.protocol.framing import (
    FRAME_TYPE_JSON,
    SUPPORTED_VERSIONS,
    BinaryFrame,
    FramingError,
    pack,
    unpack,
)

pytestmark = pytest.mark.unit


def _random_payloads() -> list[bytes]:
    rng = random.Random(1234)
    sizes = [0, 1, 3, 4, 15, 16, 17, 120, 480, 4000, 65535]
    return [rng.randbytes(size) for size in sizes]


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("payload", _random_payloads(), ids=lambda p: f"{len(p)}B")
def test_round_trip_keeps_payload(version: int, payload: bytes) -> None:
    assert unpack(pack(payload, version), version).payload == payload


def test_v1_is_the_raw_packet() -> None:
    assert pack(b"\x01\x02\x03", 1, timestamp_ms=99) == b"\x01\x02\x03"
    assert unpack(b"\x01\x02\x03", 1) == BinaryFrame(payload=b"\x01\x02\x03")
    assert unpack(b"", 1) == BinaryFrame(payload=b"")


def test_v2_layout_is_big_endian_with_16_byte_header() -> None:
    data = pack(b"abc", 2, frame_type=FRAME_TYPE_JSON, timestamp_ms=0x01020304)
    assert data == bytes([0, 2, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 3]) + b"abc"
    assert unpack(data, 2) == BinaryFrame(payload=b"abc", frame_type=1, timestamp_ms=0x01020304)


def test_v2_timestamp_wraps_like_a_uint32_clock() -> None:
    data = pack(b"x", 2, timestamp_ms=2**32 + 2**31 + 5)
    assert unpack(data, 2).timestamp_ms == 2**31 + 5


def test_v3_layout_is_big_endian_with_4_byte_header() -> None:
    data = pack(b"\xaa" * 300, 3, timestamp_ms=1234)
    assert data[:4] == bytes([0, 0, 0x01, 0x2C])
    assert unpack(data, 3) == BinaryFrame(payload=b"\xaa" * 300, frame_type=0, timestamp_ms=0)


def test_v3_payload_is_limited_to_65535_bytes() -> None:
    with pytest.raises(FramingError, match="65535"):
        pack(bytes(65536), 3)


@pytest.mark.parametrize("version", [0, 4, 16])
def test_unknown_version_is_rejected(version: int) -> None:
    with pytest.raises(FramingError, match="version"):
        pack(b"x", version)
    with pytest.raises(FramingError, match="version"):
        unpack(b"x" * 32, version)


@pytest.mark.parametrize(("version", "header_size"), [(2, 16), (3, 4)])
def test_truncated_header_is_rejected(version: int, header_size: int) -> None:
    data = pack(b"", version)
    assert len(data) == header_size
    for cut in range(header_size):
        with pytest.raises(FramingError, match="shorter than"):
            unpack(data[:cut], version)


@pytest.mark.parametrize("version", [2, 3])
def test_payload_size_larger_than_message_is_rejected(version: int) -> None:
    data = pack(b"0123456789", version)
    with pytest.raises(FramingError, match="10-byte payload but only 9"):
        unpack(data[:-1], version)


@pytest.mark.parametrize("version", [2, 3])
def test_bytes_after_payload_are_ignored(version: int) -> None:
    data = pack(b"opus", version) + b"trailing"
    assert unpack(data, version).payload == b"opus"


def test_v2_header_with_another_version_is_rejected() -> None:
    data = struct.pack(">HHIII", 3, 0, 0, 0, 1) + b"x"
    with pytest.raises(FramingError, match="says version 3"):
        unpack(data, 2)


def test_v3_type_must_fit_one_byte() -> None:
    with pytest.raises(FramingError, match="uint8"):
        pack(b"x", 3, frame_type=256)


def test_negative_timestamp_is_rejected() -> None:
    with pytest.raises(FramingError, match="negative"):
        pack(b"x", 2, timestamp_ms=-1)


def test_unpack_accepts_memoryview() -> None:
    data = memoryview(pack(b"hello", 3))
    frame = unpack(data, 3)
    assert frame.payload == b"hello"
    assert isinstance(frame.payload, bytes)
