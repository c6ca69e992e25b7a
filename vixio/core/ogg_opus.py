"""Opus packets into one Ogg/Opus file (RFC 7845): what a Xiaozhi device plays from a `notify` URL.

The firmware's demuxer (main/audio/demuxer/ogg_demuxer.cc) needs the OpusHead and OpusTags
packets first, reads the decoder's rate from OpusHead's "input sample rate" field (not 48 kHz
as a desktop player would), assumes 60 ms packets and holds at most 8 KB per packet; its own
sounds are mono 16 kHz with a pre-skip of 312. This writer makes the same: a single logical
stream, mono, the encoder's rate in OpusHead, granule positions in 48 kHz samples as the RFC asks.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Sequence

PRE_SKIP = 312
"""Samples (at 48 kHz) a decoder drops at the start: libopus' look-ahead, as the firmware's sounds carry."""
MAX_PACKET_BYTES = 8192
"""The firmware's packet buffer; a longer packet would be dropped there."""
_MAX_SEGMENTS = 255


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
        table.append(crc & 0xFFFFFFFF)
    return table


_CRC = _crc_table()


def ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7, not reflected, initial 0)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC[(crc >> 24) ^ byte]
    return crc


def _page(packets: Sequence[bytes], granule: int, serial: int, sequence: int, flags: int) -> bytes:
    lacing = bytearray()
    for packet in packets:
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    header = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, serial, sequence, 0, len(lacing))
    page = bytearray(header + lacing + b"".join(packets))
    struct.pack_into("<I", page, 22, ogg_crc(bytes(page)))
    return bytes(page)


def opus_head(sample_rate: int, channels: int = 1, pre_skip: int = PRE_SKIP) -> bytes:
    return struct.pack("<8sBBHIhB", b"OpusHead", 1, channels, pre_skip, sample_rate, 0, 0)


def opus_tags(vendor: str = "vixio") -> bytes:
    raw = vendor.encode()
    return b"OpusTags" + struct.pack("<I", len(raw)) + raw + struct.pack("<I", 0)


def ogg_opus(packets: Sequence[bytes], sample_rate: int, frame_ms: int = 60, *, serial: int | None = None) -> bytes:
    """One Ogg/Opus file of `packets` (each `frame_ms` of mono audio encoded at `sample_rate`)."""
    if any(len(packet) > MAX_PACKET_BYTES for packet in packets):
        raise ValueError(f"an Opus packet is longer than {MAX_PACKET_BYTES} bytes")
    serial = secrets.randbits(32) if serial is None else serial
    out = [_page([opus_head(sample_rate)], 0, serial, 0, 0x02), _page([opus_tags()], 0, serial, 1, 0)]
    step = 48 * frame_ms  # granule positions count 48 kHz samples whatever the encoder's rate
    granule, sequence, segments = PRE_SKIP, 2, 0
    page_packets: list[bytes] = []
    for index, packet in enumerate(packets):
        need = len(packet) // 255 + 1
        if page_packets and segments + need > _MAX_SEGMENTS:
            out.append(_page(page_packets, granule, serial, sequence, 0))
            sequence, segments = sequence + 1, 0
            page_packets = []
        page_packets.append(packet)
        segments += need
        granule += step
        if index == len(packets) - 1:
            out.append(_page(page_packets, granule, serial, sequence, 0x04))
    if not packets:
        out.append(_page([], PRE_SKIP, serial, sequence, 0x04))
    return b"".join(out)
