"""Binary messages handed to the session as websockets parses them (`DirectConnection`): taken that
way while the reader idles, in the order the device sent everything, through the real server too."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets
from websockets.asyncio.server import serve

from vixio.core.protocol import Message
from vixio.patches.websockets import DirectConnection, connection_class
from vixio.testing.device import SimulatedDevice
from vixio.transports.xiaozhi.protocol import messages as xp
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder
from vixio.transports.xiaozhi.websocket.session_io import XiaozhiSessionIO

from .conftest import ws_url

pytestmark = pytest.mark.integration


class SessionIO(XiaozhiSessionIO):
    """The Xiaozhi session I/O over connections a test server accepts."""

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def test_this_websockets_version_hands_binary_messages_over() -> None:
    # Fails loudly when websockets changes what DirectConnection builds on.
    assert connection_class() is DirectConnection


async def serve_a_session(script: list[bytes | str], pause_after: set[int]) -> tuple[list[Any], DirectConnection]:
    """Send `script` from a client (pausing 10 ms after the messages in `pause_after`) to a
    session whose audio is handled inline and whose text messages keep it busy for 30 ms each
    (so its read queue of 4 fills); what the session saw, in order, and its connection."""
    io = SessionIO(xp.XiaozhiProtocol(1))
    io._queue_size = 4
    seen: list[Any] = []
    done = asyncio.Event()
    sockets: list[DirectConnection] = []

    def inline(message: Message) -> bool:
        if message.get("type") != xp.AUDIO:
            return False
        seen.append(message["data"])
        return True

    async def handler(socket: Any) -> None:
        sockets.append(socket)
        io._sockets["s"] = socket
        io.open_session_io("s")
        io.set_inline_handler("s", inline)
        socket.receiver = lambda data: io.receive_now("s", data)
        while (message := await io.read("s")) is not None:
            if message.get("type") == xp.AUDIO:  # audio queued behind text comes this way
                seen.append(message["data"])
                continue
            await asyncio.sleep(0.03)
            seen.append(message["n"])
            if message["n"] == "last":
                done.set()
        await io.close_session_io("s")

    async with serve(handler, "127.0.0.1", 0, create_connection=DirectConnection, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with websockets.connect(f"ws://127.0.0.1:{port}/", compression=None) as client:
            for index, message in enumerate([*script, '{"type": "listen", "n": "last"}']):
                await client.send(message)
                if index in pause_after:
                    await asyncio.sleep(0.01)
            await asyncio.wait_for(done.wait(), 10)
    return seen, sockets[0]


def expected(script: list[bytes | str]) -> list[Any]:
    return [m if isinstance(m, bytes) else json.loads(m)["n"] for m in [*script, '{"type": "listen", "n": "last"}']]


async def test_binary_messages_go_straight_to_an_idle_session() -> None:
    script: list[bytes | str] = [bytes([255, k]) * 20 for k in range(20)]
    seen, socket = await serve_a_session(script, pause_after=set(range(20)))
    assert seen == expected(script)
    assert socket.direct >= 15


async def test_binary_messages_never_overtake_text_the_session_is_still_handling() -> None:
    """Text and binary messages interleaved, in bursts: every one is seen once, in the order sent."""
    script: list[bytes | str] = []
    pauses = set()
    for burst in range(30):
        for k in range(6):
            script.append(
                f'{{"type": "listen", "n": "{burst}.{k}"}}' if (burst + k) % 4 == 0 else bytes([burst, k]) * 20
            )
        if burst % 3:
            pauses.add(len(script) - 1)
    seen, socket = await serve_a_session(script, pauses)
    assert seen == expected(script)
    assert socket.direct < sum(isinstance(m, bytes) for m in script)


async def test_microphone_frames_reach_the_session_without_recv_on_the_real_server(make_server) -> None:
    server = await make_server()
    encoder = OpusEncoder(16000)
    async with SimulatedDevice(ws_url=ws_url(server)) as device:
        await device.connect()
        await device.start_listening("auto")
        for _ in range(20):
            await device.send_raw(encoder.encode(b"\x10\x00" * 960))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        (connection,) = server.transport.connections.values()
        (socket,) = server.transport._sockets.values()
        assert connection.audio_frames_in == 20
        assert isinstance(socket, DirectConnection) and socket.direct >= 15
