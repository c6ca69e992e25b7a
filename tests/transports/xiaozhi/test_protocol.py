from __future__ import annotations

import json
import struct

import pytest

from vixio.core.chunk import AudioChunk, TextChunk
from vixio.core.protocol import ProtocolError
from vixio.transports.xiaozhi.protocol import messages as xp

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("version", [1, 2, 3])
def test_audio_round_trips_in_every_binary_version(version: int) -> None:
    protocol = xp.XiaozhiProtocol(version)
    wire = protocol.encode(xp.audio(b"\x01\x02opus", timestamp_ms=1234))
    assert isinstance(wire, bytes)
    message = protocol.decode(wire)
    assert message["type"] == "audio" and message["data"] == b"\x01\x02opus"
    assert message["timestamp_ms"] == (1234 if version == 2 else 0)


def test_v3_header_is_big_endian_type_reserved_size() -> None:
    wire = xp.XiaozhiProtocol(3).encode(xp.audio(b"abc"))
    assert wire[:4] == struct.pack(">BBH", 0, 0, 3) and wire[4:] == b"abc"


def test_v2_header_layout() -> None:
    wire = xp.XiaozhiProtocol(2).encode(xp.audio(b"abcd", timestamp_ms=7))
    assert struct.unpack(">HHIII", wire[:16]) == (2, 0, 0, 7, 4)


@pytest.mark.parametrize("frame", ["{not json", "[1,2]", '{"no_type": 1}', '{"type": 5}', b"\x00\x00\x00\x09ab"])
def test_malformed_frames_raise_protocol_error(frame: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        xp.XiaozhiProtocol(3).decode(frame)


def test_json_is_compact_utf8() -> None:
    wire = xp.XiaozhiProtocol().encode(xp.stt("你好"))
    assert wire == '{"type":"stt","text":"你好"}'


def test_a_lone_surrogate_goes_out_as_the_replacement_character() -> None:
    # A device may type "\\ud800" (valid JSON): echoed in `stt`, it must still be UTF-8.
    wire = xp.XiaozhiProtocol().encode(xp.stt("a\ud800b 你好"))
    assert wire == '{"type":"stt","text":"a\ufffdb 你好"}'
    wire.encode()


def test_server_hello_has_every_field_devices_need() -> None:
    hello = xp.server_hello("sid", 1)
    assert hello == {
        "type": "hello",
        "version": 1,
        "transport": "websocket",
        "session_id": "sid",
        "audio_params": {"format": "opus", "sample_rate": 24000, "channels": 1, "frame_duration": 60},
    }


def test_builders() -> None:
    assert xp.tts("start") == {"type": "tts", "state": "start"}
    assert xp.tts("sentence_start", "Hi") == {"type": "tts", "state": "sentence_start", "text": "Hi"}
    assert xp.llm_emotion("happy") == {"type": "llm", "emotion": "happy", "text": ""}
    with pytest.raises(ValueError):
        xp.llm_emotion("ecstatic")
    assert xp.system() == {"type": "system", "command": "reboot"}
    assert xp.alert("Warning", "Battery low", "sad") == {
        "type": "alert",
        "status": "Warning",
        "message": "Battery low",
        "emotion": "sad",
    }
    assert xp.custom({"message": "x"}) == {"type": "custom", "payload": {"message": "x"}}
    mcp = xp.XiaozhiProtocol().create_mcp_message({"id": 1})
    assert json.loads(xp.XiaozhiProtocol().encode(mcp)) == {"type": "mcp", "payload": {"id": 1}}


def test_chunk_mapping() -> None:
    protocol = xp.XiaozhiProtocol()
    assert protocol.chunk_to_messages(TextChunk(text="what time is it", role="user")) == [xp.stt("what time is it")]
    assert protocol.chunk_to_messages(TextChunk(text="😀 It is\nnoon.", role="assistant")) == [
        xp.tts("sentence_start", "It is noon.")
    ]
    assert protocol.chunk_to_messages(TextChunk(text="🎉", role="assistant")) == []
    assert protocol.chunk_to_messages(AudioChunk(pcm=b"", sample_rate=24000)) == []
    chunk = protocol.message_to_chunk({"type": "listen", "state": "detect", "text": " hello "}, "s", 3)
    assert isinstance(chunk, TextChunk) and (chunk.text, chunk.role, chunk.session_id, chunk.turn_id) == (
        "hello",
        "user",
        "s",
        3,
    )
    assert protocol.message_to_chunk({"type": "listen", "state": "start"}, "s", 0) is None
