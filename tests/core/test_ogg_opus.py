"""The Ogg/Opus writer (vixio/core/ogg_opus.py): what the firmware's demuxer needs (OpusHead with
the encoder's rate, OpusTags, valid page CRCs, granule positions in 48 kHz samples), checked byte
by byte and by FFmpeg's demuxer and decoder (PyAV) on audio from the project's Opus encoder."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from vixio.core.ogg_opus import PRE_SKIP, ogg_crc, ogg_opus
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder

pytestmark = pytest.mark.unit


def pages(data: bytes) -> list[tuple[int, int, int, list[bytes]]]:
    """(flags, granule, sequence, packets) of each page, every CRC checked."""
    found, at = [], 0
    while at < len(data):
        assert data[at : at + 4] == b"OggS"
        _, flags, granule, _, sequence, crc, count = struct.unpack_from("<BBqIIIB", data, at + 4)
        lacing = data[at + 27 : at + 27 + count]
        size = 27 + count + sum(lacing)
        page = bytearray(data[at : at + size])
        page[22:26] = b"\0\0\0\0"
        assert ogg_crc(bytes(page)) == crc
        packets, body, current = [], at + 27 + count, b""
        for value in lacing:
            current += data[body : body + value]
            body += value
            if value < 255:
                packets.append(current)
                current = b""
        found.append((flags, granule, sequence, packets))
        at += size
    return found


def speech_like(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t) * 9000).astype("<i2").tobytes()


def test_a_file_the_firmware_and_ffmpeg_both_read() -> None:
    av = pytest.importorskip("av", reason="PyAV (the edge extra) decodes the files with FFmpeg")

    encoder = OpusEncoder(16000, 1, 60)
    pcm = speech_like(20.0)  # more than one page of packets
    packets = [encoder.encode(pcm[i : i + encoder.frame_bytes]) for i in range(0, len(pcm), encoder.frame_bytes)]
    data = ogg_opus(packets, 16000, serial=7)
    found = pages(data)
    head, tags = found[0][3][0], found[1][3][0]
    assert found[0][0] == 0x02 and head[:8] == b"OpusHead" and head[9] == 1
    assert struct.unpack_from("<HI", head, 10) == (PRE_SKIP, 16000)
    assert tags[:8] == b"OpusTags"
    assert [p[2] for p in found] == list(range(len(found))) and len(found) > 3
    assert found[-1][0] == 0x04 and found[-1][1] == PRE_SKIP + len(packets) * 2880
    assert [packet for page in found[2:] for packet in page[3]] == packets
    with av.open(io.BytesIO(data), format="ogg") as container:
        stream = container.streams.audio[0]
        frames = list(container.decode(stream))
    samples = sum(frame.samples for frame in frames)
    assert samples == len(packets) * 2880 - PRE_SKIP
    decoded = np.concatenate([frame.to_ndarray().reshape(-1) for frame in frames])
    assert float(np.abs(decoded).max()) > 0.1  # sound, not silence


def test_a_packet_the_firmware_could_not_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="8192"):
        ogg_opus([bytes(9000)], 16000)
