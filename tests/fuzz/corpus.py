"""The fuzz corpus: frames a hostile or broken client sends, grouped into cases.

Every case is deterministic (a fixed seed), so a failure names a case that reproduces. A case
is a protocol version and a list of frames; `Text` frames may be invalid UTF-8 (sent as a text
frame all the same), `bytes` are binary frames. Cases cover every message type the firmware
sends (hello, listen, abort, mcp, and unknown types), bare JSON-RPC, the server-bound MCP
replies, v2/v3 headers that lie about their length, invalid UTF-8, oversize frames and deep JSON.
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass, field
from typing import Any

OVERSIZE = 300 * 1024
"""Above the default `xiaozhi.max_message_bytes` (256 KiB)."""


@dataclass(frozen=True)
class Text:
    """A text frame's raw bytes (possibly not UTF-8)."""

    data: bytes


Frame = Text | bytes


@dataclass
class Case:
    name: str
    frames: list[Frame]
    protocol_version: int = 1
    closes: bool = False
    """Whether the server is expected to close the connection (oversize, deep, invalid UTF-8)."""
    hello: bool = True
    features: dict[str, Any] = field(default_factory=lambda: {"mcp": True})


def text(value: Any) -> Text:
    return Text(value.encode() if isinstance(value, str) else json.dumps(value, ensure_ascii=False).encode())


# Values that stand where a field's proper value should be.
WEIRD: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    1.5e308,
    "",
    "x" * 5000,
    "🎤" * 50,
    [],
    {},
    [1, [2, [3]]],
    {"a": {"b": None}},
    "\u0000",
    "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
]


def message_cases(rng: random.Random) -> list[Case]:
    cases = []
    shapes: dict[str, dict[str, Any]] = {
        "hello": {
            "type": "hello",
            "version": 1,
            "transport": "websocket",
            "features": {"mcp": True},
            "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
        },
        "listen": {"type": "listen", "state": "start", "mode": "auto", "text": "hi", "session_id": "s"},
        "abort": {"type": "abort", "reason": "wake_word_detected", "session_id": "s"},
        "mcp": {"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}},
        "goodbye": {"type": "goodbye", "session_id": "s"},
        "audio": {"type": "audio", "data": "AAAA"},
    }
    for kind, shape in shapes.items():
        frames: list[Frame] = []
        for key in shape:
            for weird in WEIRD:
                frames.append(text({**shape, key: weird}))
        for _ in range(40):
            mutated = {k: v for k, v in shape.items() if rng.random() < 0.6}
            if rng.random() < 0.5:
                mutated[rng.choice(list(shape))] = rng.choice(WEIRD)
            frames.append(text(mutated))
        cases.append(Case(f"{kind}-fields", frames))
    listen_states = ["start", "stop", "detect", "", None, 7, "START"]
    modes = ["auto", "manual", "realtime", "", None, ["auto"]]
    cases.append(
        Case(
            "listen-states",
            [
                text({"type": "listen", "state": s, "mode": m, "text": t})
                for s in listen_states
                for m in modes
                for t in ("", "hi", None, 5)
            ],
        )
    )
    cases.append(
        Case(
            "not-objects",
            [text(v) for v in ([], [1], "str", 5, None, True)]
            + [
                text('{"type": 5}'),
                text('{"type": null}'),
                text("{}"),
                text('{"type": ""}'),
                text("not json"),
                text("{"),
                text('{"type":"listen"'),
                text(""),
                text(" "),
                text('{"type":"listen","state":"detect","text":"\\ud800"}'),
            ],
        )
    )
    return cases


def mcp_cases() -> list[Case]:
    payloads: list[Any] = [
        None,
        [],
        "x",
        5,
        {},
        {"jsonrpc": "1.0"},
        {"jsonrpc": "2.0"},
        {"jsonrpc": "2.0", "id": None},
        {"jsonrpc": "2.0", "id": "str", "result": {}},
        {"jsonrpc": "2.0", "id": 1.5, "result": {}},
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "id": 2**70, "result": {}},
        {"jsonrpc": "2.0", "id": 1, "result": None},
        {"jsonrpc": "2.0", "id": 1, "error": "nope"},
        {"jsonrpc": "2.0", "id": 2, "result": {"tools": "many"}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {
                "tools": [
                    None,
                    5,
                    {},
                    {"name": 7},
                    {"name": ""},
                    {"name": "x", "inputSchema": "s"},
                    {"name": "y", "inputSchema": {"$ref": "http://127.0.0.1:9/x"}},
                    {"name": "z", "inputSchema": {"properties": {"p": {"type": "string", "pattern": "(a+)+$"}}}},
                ],
                "nextCursor": 5,
            },
        },
        {"jsonrpc": "2.0", "id": 3, "result": {"content": None, "isError": "yes"}},
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "method": "tools/call", "id": 9, "params": {}},
        {"jsonrpc": "2.0", "method": 5},
        {"jsonrpc": "2.0", "method": "mcp/registerTools", "id": 1},
        {"jsonrpc": "2.0", "method": "mcp/registerTools", "id": 2, "params": {"tools": "x"}},
        {
            "jsonrpc": "2.0",
            "method": "mcp/registerTools",
            "id": 3,
            "params": {"tools": [None, {"name": "t"}, {"name": "u", "description": 1}]},
        },
        {
            "jsonrpc": "2.0",
            "method": "mcp/registerTools",
            "id": {"a": 1},
            "params": {"tools": [], "mac_addr": "m" * 9000},
        },
        {"jsonrpc": "2.0", "id": "vixio-00000000-1", "result": {}},
    ]
    wrapped = [text({"type": "mcp", "payload": p}) for p in payloads]
    bare = [text(p) for p in payloads if isinstance(p, dict)]
    return [Case("mcp-wrapped", wrapped), Case("mcp-bare", bare)]


def binary_cases(rng: random.Random) -> list[Case]:
    cases = []
    for version in (1, 2, 3):
        frames: list[Frame] = [b"", b"\x00", bytes(rng.getrandbits(8) for _ in range(200))]
        if version == 2:
            frames += [
                struct.pack(">HHIII", 2, 0, 0, 0, 100) + b"x" * 10,  # payload_size lies (longer)
                struct.pack(">HHIII", 2, 0, 0, 0, 2**32 - 1),  # lies hugely
                struct.pack(">HHIII", 3, 0, 0, 0, 0),  # header version is not 2
                struct.pack(">HHIII", 2, 1, 0, 0, 4) + b"{}{}",  # JSON type in a binary frame
                struct.pack(">HHIII", 2, 0, 0, 0, 2) + b"abcdef",  # shorter than the frame
                b"\x00\x02\x00",  # truncated header
            ]
        if version == 3:
            frames += [
                struct.pack(">BBH", 0, 0, 65535) + b"x",  # lies
                struct.pack(">BBH", 9, 0, 1) + b"x",  # unknown type
                struct.pack(">BBH", 0, 0, 0),  # empty payload
                b"\x00\x00",  # truncated header
            ]
        frames += [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))) for _ in range(50)]
        # Audio while listening: garbage Opus must be dropped, not crash the decoder.
        listening = (
            [text({"type": "listen", "state": "start", "mode": "manual"})]
            + frames
            + [text({"type": "listen", "state": "stop"})]
        )
        cases.append(Case(f"binary-v{version}", listening, protocol_version=version))
    return cases


def closing_cases() -> list[Case]:
    return [
        Case("invalid-utf8", [Text(b'{"type":"listen","state":"\xff\xfe"}')], closes=True),
        Case("oversize-text", [text('{"type":"listen","text":"' + "x" * OVERSIZE + '"}')], closes=True),
        Case("oversize-binary", [b"\x00" * OVERSIZE], closes=True),
        Case("deep-array", [text("[" * 100_000)], closes=True),
        Case("deep-object", [text('{"a":' * 5_000 + "1" + "}" * 5_000)], closes=True),
        Case(
            "deep-mcp",
            [
                text(
                    {
                        "type": "mcp",
                        "payload": {
                            "jsonrpc": "2.0",
                            "method": "mcp/registerTools",
                            "id": 1,
                            "params": {"tools": [_nested(300)]},
                        },
                    }
                )
            ],
            closes=True,
        ),
        Case("deep-before-hello", [text("[" * 1000)], closes=True, hello=False),
    ]


def _nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"n": node}
    return node


def first_hello_cases() -> list[Case]:
    """The session's first hello itself malformed (it fixes the protocol version and features)."""
    hello = {"type": "hello", "transport": "websocket"}
    weird = [
        {"version": True},
        {"version": 2**64},
        {"version": "3"},
        {"version": None},
        {"version": -1},
        {"version": 3.0},
        {"features": "x"},
        {"features": []},
        {"features": {"mcp": "yes"}},
        {"audio_params": "opus"},
        {"audio_params": {"sample_rate": -1, "frame_duration": 10**9}},
    ]
    return [
        Case(
            f"first-hello-{i}",
            [text({**hello, **fields}), text({"type": "listen", "state": "detect", "text": "hi"})],
            hello=False,
        )
        for i, fields in enumerate(weird)
    ]


def all_cases(seed: int = 11) -> list[Case]:
    rng = random.Random(seed)
    return message_cases(rng) + mcp_cases() + binary_cases(rng) + first_hello_cases() + closing_cases()
