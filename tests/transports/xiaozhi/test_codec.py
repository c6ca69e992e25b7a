"""Opus, resampling and frame slicing with the real libopus and soxr."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import opuslib_next
import pytest

from vixio.transports.xiaozhi.protocol import codec
from vixio.transports.xiaozhi.protocol.codec import (
    DOWNLINK_SAMPLE_RATE,
    FRAME_DURATION_MS,
    UPLINK_SAMPLE_RATE,
    CodecError,
    FrameSplitter,
    OpusDecoder,
    OpusEncoder,
    Resampler,
    packet_duration,
    resample,
)

pytestmark = pytest.mark.unit

TONE_HZ = 440.0


def sine(rate: int, seconds: float, hz: float = TONE_HZ, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.round(np.sin(2 * np.pi * hz * t) * amplitude * 32767).astype(np.int16)


def pcm_to_array(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float64)


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    windowed = samples * np.hanning(len(samples))
    spectrum = np.abs(np.fft.rfft(windowed))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples**2)))


def chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


# --- Opus ---------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [UPLINK_SAMPLE_RATE, DOWNLINK_SAMPLE_RATE])
def test_sine_survives_opus_round_trip(rate: int) -> None:
    encoder = OpusEncoder(sample_rate=rate)
    decoder = OpusDecoder(sample_rate=rate)
    source = sine(rate, 1.2)
    decoded = b"".join(decoder.decode(encoder.encode(frame)) for frame in chunks(source.tobytes(), encoder.frame_bytes))

    assert len(decoded) == 20 * encoder.frame_bytes
    # Skip the first frames: the codec's look-ahead delays and ramps the start.
    out = pcm_to_array(decoded)[2 * encoder.frame_samples : 18 * encoder.frame_samples]
    ref = source[2 * encoder.frame_samples : 18 * encoder.frame_samples].astype(np.float64)
    assert dominant_hz(out, rate) == pytest.approx(TONE_HZ, abs=2.0)
    assert rms(out) == pytest.approx(rms(ref), rel=0.25)
    # The decoded tone stays in phase with the source within the codec delay.
    best = max(np.corrcoef(out[lag:], ref[: len(ref) - lag])[0, 1] for lag in range(0, rate // 100))
    assert best > 0.95


@pytest.mark.parametrize("duration_ms", [20, 40, 60, 120])
def test_uplink_decoder_accepts_packets_up_to_120_ms(duration_ms: int) -> None:
    encoder = OpusEncoder(sample_rate=UPLINK_SAMPLE_RATE, frame_duration_ms=duration_ms)
    decoder = OpusDecoder()
    pcm = decoder.decode(encoder.encode(sine(UPLINK_SAMPLE_RATE, duration_ms / 1000).tobytes()))
    assert len(pcm) == UPLINK_SAMPLE_RATE * duration_ms // 1000 * 2


@pytest.mark.parametrize("duration_ms", [10, 20, 40, 60, 120])
@pytest.mark.parametrize("rate", [16000, 24000])
def test_packet_duration_is_read_from_the_header_as_the_decoder_finds_it(duration_ms: int, rate: int) -> None:
    encoder = OpusEncoder(sample_rate=rate, frame_duration_ms=duration_ms)
    for pcm in (sine(rate, duration_ms / 1000), np.zeros(rate * duration_ms // 1000, dtype=np.int16)):
        packet = encoder.encode(pcm.tobytes())
        decoded = OpusDecoder(sample_rate=rate).decode(packet)
        assert packet_duration(packet) == pytest.approx(len(decoded) / 2 / rate)
    assert packet_duration(b"") == 0.0
    assert packet_duration(b"\xff") == 0.02  # code 3 without its count byte: one frame
    assert packet_duration(b"\xfb\x00") == 0.02  # code 3 counting zero frames (invalid): one frame
    assert packet_duration(b"\x1b\x3f") == 0.12  # 63 frames of 60 ms: capped at 120 ms


def test_decoder_output_rate_differs_from_encoder_rate() -> None:
    packet = OpusEncoder(sample_rate=DOWNLINK_SAMPLE_RATE).encode(sine(DOWNLINK_SAMPLE_RATE, 0.06).tobytes())
    assert len(OpusDecoder(sample_rate=UPLINK_SAMPLE_RATE).decode(packet)) == 960 * 2


def test_empty_packet_is_dtx_silence() -> None:
    assert OpusDecoder().decode(b"") == b""


def test_dtx_packets_from_the_device_decode_to_quiet_frames() -> None:
    # The device encodes with DTX on; silence then yields 1-byte packets.
    device = opuslib_next.Encoder(UPLINK_SAMPLE_RATE, 1, "audio")
    device.dtx = 1
    packets = [device.encode(bytes(1920), 960) for _ in range(20)]
    assert min(len(p) for p in packets) <= 2
    decoder = OpusDecoder()
    for packet in packets:
        pcm = decoder.decode(packet)
        assert len(pcm) == 1920
        assert np.abs(pcm_to_array(pcm)).max() < 200


@pytest.mark.parametrize("packet", [b"\x03", b"\x03\x00", b"\xff"], ids=["no-count", "zero-frames", "cut"])
def test_malformed_packet_raises_codec_error(packet: bytes) -> None:
    with pytest.raises(CodecError, match="cannot decode"):
        OpusDecoder().decode(packet)


def test_decoder_survives_a_malformed_packet() -> None:
    decoder = OpusDecoder()
    with pytest.raises(CodecError):
        decoder.decode(b"\x03")
    packet = OpusEncoder(sample_rate=UPLINK_SAMPLE_RATE).encode(sine(UPLINK_SAMPLE_RATE, 0.06).tobytes())
    assert len(decoder.decode(packet)) == 1920


def test_stereo_decoder_interleaves_channels() -> None:
    packet = OpusEncoder(sample_rate=24000, channels=2).encode(bytes(1440 * 4))
    assert len(OpusDecoder(sample_rate=24000, channels=2).decode(packet)) == 1440 * 4


def test_encoder_frame_size_follows_rate_and_duration() -> None:
    downlink = OpusEncoder()
    assert (downlink.frame_samples, downlink.frame_bytes) == (1440, 2880)
    uplink = OpusEncoder(sample_rate=UPLINK_SAMPLE_RATE, frame_duration_ms=20)
    assert (uplink.frame_samples, uplink.frame_bytes) == (320, 640)
    assert FRAME_DURATION_MS == 60


def test_encoder_pads_a_short_frame_with_silence() -> None:
    encoder = OpusEncoder()
    tail = sine(DOWNLINK_SAMPLE_RATE, 0.01).tobytes()
    decoded = pcm_to_array(OpusDecoder(DOWNLINK_SAMPLE_RATE).decode(encoder.encode(tail)))
    assert len(decoded) == encoder.frame_samples
    assert np.abs(decoded[-480:]).max() < 300


def test_encoder_rejects_more_than_one_frame() -> None:
    encoder = OpusEncoder()
    with pytest.raises(ValueError, match="at most one frame"):
        encoder.encode(bytes(encoder.frame_bytes + 2))


def test_encoder_rejects_odd_length_pcm() -> None:
    with pytest.raises(ValueError, match="whole number of int16 samples"):
        OpusEncoder().encode(bytes(101))


def test_encoder_applies_bitrate() -> None:
    source = sine(DOWNLINK_SAMPLE_RATE, 0.6).tobytes()
    low, high = OpusEncoder(bitrate=8000), OpusEncoder(bitrate=64000)
    low_size = sum(len(low.encode(frame)) for frame in chunks(source, low.frame_bytes))
    high_size = sum(len(high.encode(frame)) for frame in chunks(source, high.frame_bytes))
    assert low_size * 3 < high_size


@pytest.mark.parametrize(
    "kwargs", [{"sample_rate": 22050}, {"channels": 3}, {"frame_duration_ms": 30}, {"bitrate": 100}]
)
def test_encoder_rejects_bad_settings(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be"):
        OpusEncoder(**kwargs)


def test_decoder_rejects_a_rate_opus_cannot_output() -> None:
    with pytest.raises(ValueError, match="22050"):
        OpusDecoder(sample_rate=22050)


def test_missing_opus_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opuslib_next", None)
    codec._opuslib.cache_clear()
    try:
        with pytest.raises(
            ImportError, match=r"vixio\[xiaozhi\] extra: pip install -e '\.\[xiaozhi\]' in the vixio checkout"
        ):
            OpusDecoder()
    finally:
        codec._opuslib.cache_clear()


# --- Resampling ---------------------------------------------------------------------


@pytest.mark.parametrize(("in_rate", "out_rate"), [(16000, 24000), (22050, 24000), (24000, 16000)])
@pytest.mark.parametrize("chunk_bytes", [275, 2 * 1323])
def test_streaming_matches_one_shot(in_rate: int, out_rate: int, chunk_bytes: int) -> None:
    source = sine(in_rate, 1.0).tobytes()
    one_shot = resample(source, in_rate, out_rate)

    resampler = Resampler(in_rate, out_rate)
    streamed = b"".join(resampler.process(chunk) for chunk in chunks(source, chunk_bytes))
    streamed += resampler.process(b"", last=True)

    assert len(one_shot) == len(streamed) == 2 * out_rate
    assert np.abs(pcm_to_array(streamed) - pcm_to_array(one_shot)).max() <= 4
    assert dominant_hz(pcm_to_array(streamed), out_rate) == pytest.approx(TONE_HZ, abs=2.0)


def test_resampler_holds_a_split_sample_until_completed() -> None:
    resampler = Resampler(16000, 16000)
    assert resampler.process(b"\x01") == b""
    assert resampler.process(b"\x02\x03") == b"\x01\x02"
    assert resampler.process(b"\x04", last=True) == b"\x03\x04"


def test_resampler_stream_ending_mid_sample_raises() -> None:
    resampler = Resampler(16000, 24000)
    resampler.process(bytes(641))
    with pytest.raises(ValueError, match="mid-sample"):
        resampler.process(b"", last=True)


def test_stereo_resampler_keeps_channels_apart() -> None:
    left = sine(16000, 0.5)
    stereo = np.stack([left, np.zeros_like(left)], axis=1).tobytes()
    resampler = Resampler(16000, 24000, channels=2)
    out = np.frombuffer(resampler.process(stereo, last=True), dtype="<i2").reshape(-1, 2)
    assert out.shape == (12000, 2)
    assert dominant_hz(out[:, 0].astype(np.float64), 24000) == pytest.approx(TONE_HZ, abs=2.0)
    assert np.abs(out[:, 1]).max() <= 1


def test_equal_rates_are_identity() -> None:
    pcm = sine(24000, 0.1).tobytes()
    assert resample(pcm, 24000, 24000) == pcm
    assert Resampler(24000, 24000).process(pcm) == pcm


def test_one_shot_rejects_odd_length() -> None:
    with pytest.raises(ValueError, match="whole number of int16 samples"):
        resample(bytes(3), 16000, 24000)


def test_non_positive_rate_is_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        Resampler(0, 24000)


# --- FrameSplitter ------------------------------------------------------------------


def test_splitter_returns_whole_frames_in_order() -> None:
    splitter = FrameSplitter(4)
    assert splitter.push(b"ab") == []
    assert splitter.push(b"cdefghij") == [b"abcd", b"efgh"]
    assert splitter.push(b"kl") == [b"ijkl"]
    assert splitter.flush() is None


def test_splitter_flush_pads_the_remainder_once() -> None:
    splitter = FrameSplitter(4)
    splitter.push(b"abcde")
    assert splitter.flush() == b"e\x00\x00\x00"
    assert splitter.flush() is None


def test_splitter_clear_drops_buffered_audio() -> None:
    splitter = FrameSplitter(4)
    splitter.push(b"abc")
    splitter.clear()
    assert splitter.flush() is None
    assert splitter.push(b"wxyz") == [b"wxyz"]


def test_splitter_reassembles_an_arbitrary_stream() -> None:
    data = bytes(range(256)) * 40
    splitter = FrameSplitter(2880)
    frames = [frame for chunk in chunks(data, 1001) for frame in splitter.push(chunk)]
    tail = splitter.flush()
    assert all(len(frame) == 2880 for frame in frames)
    assert tail is not None and len(tail) == 2880
    assert (b"".join(frames) + tail)[: len(data)] == data
    assert len(frames) == len(data) // 2880


def test_splitter_rejects_empty_frames() -> None:
    with pytest.raises(ValueError, match="positive"):
        FrameSplitter(0)


def test_digital_silence_reuses_one_packet_that_decodes_to_silence() -> None:
    encoder = OpusEncoder(24000)
    decoder = OpusDecoder(24000)
    t = np.arange(encoder.frame_samples) / 24000
    speech = (np.sin(2 * np.pi * 300 * t) * 8000).astype("<i2").tobytes()
    silence = bytes(encoder.frame_bytes)
    packets = [encoder.encode(p) for p in (speech, silence, silence, speech, silence)]
    assert packets[1] is packets[2] is packets[4]
    decoded = [np.frombuffer(decoder.decode(p), dtype="<i2").astype(float) for p in packets]
    assert np.abs(decoded[2]).mean() < 300 and np.abs(decoded[3]).mean() > 1000


async def test_codec_thread_gives_the_same_packets_as_inline_calls_for_many_sessions() -> None:
    """Encode on the codec thread, 12 sessions at once with their own coder state: byte-identical
    to each session encoding inline, in order (and decoding them gives the same PCM)."""
    import asyncio

    from vixio.transports.xiaozhi.protocol.codec import codec_worker

    rng = np.random.default_rng(3)
    sessions = []
    for index in range(12):
        t = np.arange(24000 * 2) / 24000
        pcm = (np.sin(2 * np.pi * (200 + 40 * index) * t) * 6000 + rng.standard_normal(t.shape[0]) * 300).astype("<i2")
        frames = [pcm[i : i + 1440].tobytes() for i in range(0, pcm.shape[0], 1440)]
        sessions.append(frames)
    expected_packets = []
    expected_pcm = []
    for frames in sessions:
        encoder, decoder = OpusEncoder(24000), OpusDecoder(24000)
        packets = [encoder.encode(frame) for frame in frames]
        expected_packets.append(packets)
        expected_pcm.append([decoder.decode(packet) for packet in packets])
    before = codec_worker().batches

    async def one(index: int) -> tuple[list[bytes], list[bytes]]:
        encoder, decoder = OpusEncoder(24000), OpusDecoder(24000)
        packets, decoded = [], []
        for frame in sessions[index]:
            packets.append(await encoder.encode_async(frame))
            decoded.append(decoder.decode(packets[-1]))
        return packets, decoded

    results = await asyncio.gather(*(one(i) for i in range(len(sessions))))
    for index, (packets, decoded) in enumerate(results):
        assert packets == expected_packets[index]
        assert decoded == expected_pcm[index]
    jobs = sum(len(frames) for frames in sessions)
    assert codec_worker().batches - before < jobs, "packets of different sessions were batched"


async def test_codec_thread_reports_a_bad_frame_to_its_session_only() -> None:
    import asyncio

    good, bad = OpusEncoder(16000), OpusEncoder(16000)
    results = await asyncio.gather(
        good.encode_async(bytes(1920)), bad.encode_async(b"\x01" * 3000), return_exceptions=True
    )
    assert isinstance(results[0], bytes) and results[0]
    assert isinstance(results[1], ValueError)


# --- ReplyFramer ---------------------------------------------------------------------


def test_reply_framer_resamples_downmixes_and_pads_the_last_frame() -> None:
    from vixio.core.chunk import AudioChunk
    from vixio.transports.xiaozhi.protocol.codec import ReplyFramer

    framer = ReplyFramer(frame_bytes=1440 * 2)  # 60 ms at 24 kHz
    mono = np.full(24000 // 10, 1000, dtype="<i2").tobytes()  # 100 ms at 24 kHz: 1 frame + 40 ms
    frames = framer.push(AudioChunk(pcm=mono, sample_rate=24000))
    assert len(frames) == 1 and len(frames[0]) == 2880
    stereo = np.tile(np.array([1000, 3000], dtype="<i2"), 16000 // 10).tobytes()  # 100 ms, 16 kHz stereo
    # A new rate ends the 24 kHz stream first: its 40 ms come out padded, then the 16 kHz audio.
    frames = framer.push(AudioChunk(pcm=stereo, sample_rate=16000, channels=2))
    first = np.frombuffer(frames[0], dtype="<i2")
    assert first[:960].tolist() == [1000] * 960 and not first[960:].any()
    rest = framer.flush()
    assert all(len(frame) == 2880 for frame in frames + rest)
    mixed = np.frombuffer(b"".join(frames[1:] + rest), dtype="<i2")
    assert abs(int(np.median(mixed[200:2000])) - 2000) <= 20  # the two channels' mean, resampled
    assert framer.flush() == []
    framer.push(AudioChunk(pcm=mono, sample_rate=24000))
    framer.clear()
    assert framer.flush() == []
