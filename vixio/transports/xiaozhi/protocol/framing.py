"""Binary WebSocket frames of the Xiaozhi protocol, versions 1, 2 and 3.

The version is fixed per connection by the `Protocol-Version` handshake header. Every
binary message carries exactly one frame; all header fields are big-endian.

- v1: the raw Opus packet, no header.
- v2: `>HHIII` = version (2), type, reserved, timestamp_ms, payload_size; 16 bytes.
- v3: `>BBH` = type, reserved, payload_size; 4 bytes.

Fields a version has no room for are dropped by `pack` and read back as 0 by `unpack`.
`unpack` trusts `payload_size`: bytes after the payload are ignored, as the firmware
does, while a payload_size larger than the message is an error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SUPPORTED_VERSIONS = (1, 2, 3)
FRAME_TYPE_OPUS = 0
"""The device always sends type 0, and treats every frame it receives as Opus."""
FRAME_TYPE_JSON = 1
"""Defined by v2; unused by the firmware, which sends JSON as WebSocket text."""

_V2_HEADER = struct.Struct(">HHIII")
_V3_HEADER = struct.Struct(">BBH")
_UINT16_MAX = 0xFFFF
_UINT32_MAX = 0xFFFFFFFF


class FramingError(ValueError):
    """A binary frame cannot be built or parsed for the negotiated protocol version."""


@dataclass(slots=True)
class BinaryFrame:
    """One binary message, decoded."""

    payload: bytes
    """The Opus packet (or, for v2 type 1, JSON bytes)."""
    frame_type: int = FRAME_TYPE_OPUS
    """0 = Opus, 1 = JSON; always 0 for v1."""
    timestamp_ms: int = 0
    """v2 only: the sender's millisecond clock, meant for echo cancellation; 0 otherwise."""


def _check_version(version: int) -> None:
    if version not in SUPPORTED_VERSIONS:
        raise FramingError(f"unsupported binary protocol version {version!r}; expected one of {SUPPORTED_VERSIONS}")


def pack(payload: bytes, version: int, *, frame_type: int = FRAME_TYPE_OPUS, timestamp_ms: int = 0) -> bytes:
    """Build the binary message carrying `payload` in protocol `version`.

    v1 carries neither `frame_type` nor `timestamp_ms`; v3 carries no timestamp.
    `timestamp_ms` wraps modulo 2**32 in v2, like a free-running uint32 clock.
    Raises FramingError when the payload or type does not fit the version's header.
    """
    _check_version(version)
    if version == 1:
        return bytes(payload)
    if timestamp_ms < 0:
        raise FramingError(f"timestamp_ms must not be negative, got {timestamp_ms}")
    if version == 2:
        if not 0 <= frame_type <= _UINT16_MAX:
            raise FramingError(f"v2 frame_type must fit uint16, got {frame_type}")
        if len(payload) > _UINT32_MAX:
            raise FramingError(f"v2 payload of {len(payload)} bytes exceeds the uint32 size field")
        header = _V2_HEADER.pack(2, frame_type, 0, timestamp_ms & _UINT32_MAX, len(payload))
        return header + payload
    if not 0 <= frame_type <= 0xFF:
        raise FramingError(f"v3 frame_type must fit uint8, got {frame_type}")
    if len(payload) > _UINT16_MAX:
        raise FramingError(f"v3 payload of {len(payload)} bytes exceeds the 65535-byte size field")
    return _V3_HEADER.pack(frame_type, 0, len(payload)) + payload


def unpack(data: bytes, version: int) -> BinaryFrame:
    """Parse one binary message received under protocol `version`.

    Raises FramingError when the header is truncated, when payload_size claims more
    bytes than the message holds, or (v2) when the header's own version is not 2.
    """
    _check_version(version)
    if version == 1:
        return BinaryFrame(payload=bytes(data))
    if version == 2:
        header = _V2_HEADER
        if len(data) < header.size:
            raise FramingError(f"v2 frame of {len(data)} bytes is shorter than its {header.size}-byte header")
        header_version, frame_type, _reserved, timestamp_ms, size = header.unpack_from(data)
        if header_version != 2:
            raise FramingError(f"v2 frame header says version {header_version}")
    else:
        header = _V3_HEADER
        if len(data) < header.size:
            raise FramingError(f"v3 frame of {len(data)} bytes is shorter than its {header.size}-byte header")
        frame_type, _reserved, size = header.unpack_from(data)
        timestamp_ms = 0
    available = len(data) - header.size
    if size > available:
        raise FramingError(f"v{version} header announces a {size}-byte payload but only {available} bytes follow")
    payload = bytes(data[header.size : header.size + size])
    return BinaryFrame(payload=payload, frame_type=frame_type, timestamp_ms=timestamp_ms)
