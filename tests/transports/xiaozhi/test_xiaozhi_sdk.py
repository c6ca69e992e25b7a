"""Interop: the third-party `xiaozhi-sdk` client (PyPI) against a real vixio server on loopback.

The sdk is someone else's reading of the Xiaozhi protocol — its own OTA client, handshake headers,
hello, MCP server and Opus decoder (bundled libopus) — so it catches what our own simulated device
would agree with us on by construction. Only the sdk's public surface is used: `init_connection`,
`set_mcp_tool`, `send_text`, `message_handler_callback`, `output_audio_queue`, `close`.

The server has no device tool client yet, so the test plays that part through the transport's
public MCP API (`set_mcp_peer` / `send_mcp`).
"""

from __future__ import annotations

import asyncio
import ctypes.util
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.core.pipeline import Pipeline
from vixio.transports.xiaozhi.websocket.transport import DeviceContext, XiaozhiTransport

from .conftest import ToneReply

pytestmark = pytest.mark.integration

# Importing the sdk points `ctypes.util.find_library("opus")` at its bundled libopus for the whole
# process; opuslib has loaded the library once the import returns, so the original is put back.
_find_library = ctypes.util.find_library
xiaozhi_sdk = pytest.importorskip(
    "xiaozhi_sdk", reason="xiaozhi-sdk is not installed (pip install xiaozhi-sdk; it is in the `test` extra)"
)
ctypes.util.find_library = _find_library
XiaoZhiWebsocket = xiaozhi_sdk.XiaoZhiWebsocket

DEVICE_MAC = "AA:BB:CC:00:5D:4B"
REPLY_SECONDS = 1.0
DOWNLINK_RATE = 24_000  # the rate vixio's hello announces; the sdk's default output rate too
TONE_HZ = 440.0  # what ToneReply plays


class RecordingMcpPeer:
    """Stands in for the device tool client: sends JSON-RPC requests through the transport and
    records every payload the device sends back."""

    def __init__(self, transport: XiaozhiTransport, session_id: str) -> None:
        self.transport = transport
        self.session_id = session_id
        self.received: list[dict[str, Any]] = []
        self._replies: dict[Any, asyncio.Future[dict[str, Any]]] = {}

    def on_mcp_message(self, payload: dict[str, Any]) -> None:
        self.received.append(payload)
        waiter = self._replies.pop(payload.get("id"), None)
        if waiter is not None and not waiter.done():
            waiter.set_result(payload)

    async def request(
        self, request_id: int, method: str, params: dict[str, Any], timeout: float = 3.0
    ) -> dict[str, Any]:
        waiter = asyncio.get_running_loop().create_future()
        self._replies[request_id] = waiter
        await self.transport.send_mcp(
            self.session_id, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        try:
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise AssertionError(
                f"no MCP reply to {method} (id {request_id}) within {timeout}s; got {self.received}"
            ) from None

    async def notify(self, method: str) -> None:
        await self.transport.send_mcp(self.session_id, {"jsonrpc": "2.0", "method": method})


@dataclass
class SdkSession:
    """One connected sdk client and what the server built for it."""

    server: VixioServer
    client: Any  # xiaozhi_sdk.XiaoZhiWebsocket
    context: DeviceContext
    station: ToneReply
    peer: RecordingMcpPeer
    messages: list[dict[str, Any]]
    """Every JSON message the sdk handed to its callback, in order."""
    queued_frames_at_tts_stop: list[int] = field(default_factory=list)
    """len(output_audio_queue) each time the callback saw `tts stop`."""
    volume_calls: list[dict[str, Any]] = field(default_factory=list)
    """Arguments the sdk passed to the `set_volume` tool."""

    async def wait_for(self, kind: str, state: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
        async def poll() -> dict[str, Any]:
            while True:
                for message in self.messages:
                    if message.get("type") == kind and (state is None or message.get("state") == state):
                        return message
                await asyncio.sleep(0.01)

        try:
            return await asyncio.wait_for(poll(), timeout)
        except TimeoutError:
            raise AssertionError(f"sdk got no {kind} {state or ''} within {timeout}s; got {self.messages}") from None


def _sdk_tools(volume_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools in the sdk's `set_mcp_tool` shape: `tool_func(arguments)` returns (result, is_error)."""

    def device_status(arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        return {"battery": 87, "network": "wifi"}, False

    async def set_volume(arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        volume_calls.append(arguments)
        return {"volume": arguments["volume"]}, False

    return [
        {
            "name": "self.get_device_status",
            "description": "Battery and network state of the device.",
            "inputSchema": {"type": "object", "properties": {}},
            "tool_func": device_status,
        },
        {
            "name": "self.audio_speaker.set_volume",
            "description": "Set the speaker volume (0-100).",
            "inputSchema": {
                "type": "object",
                "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
                "required": ["volume"],
            },
            "tool_func": set_volume,
            "is_async": True,
        },
    ]


Connect = Callable[..., Awaitable[SdkSession]]


@pytest.fixture
async def connect_sdk(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Connect]:
    """Start a vixio server (ToneReply pipeline plus a recording MCP peer) and connect the sdk
    through OTA, as a real device does."""
    # Loopback only: the sdk finds its LAN IP for the OTA body by routing towards 8.8.8.8, and
    # websockets would honour a proxy from the environment.
    monkeypatch.setattr("xiaozhi_sdk.ota.get_ip", lambda: "127.0.0.1")
    for name in ("ALL_PROXY", "HTTP_PROXY", "HTTPS_PROXY", "WS_PROXY", "WSS_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    servers: list[VixioServer] = []
    clients: list[Any] = []

    async def connect(auth: bool = True) -> SdkSession:
        config = VixioConfig.model_validate(
            {
                "xiaozhi": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "http": {"host": "127.0.0.1", "port": 0},
                    "idle_timeout": 0,
                    "auth": {"enabled": auth, "secret": "interop-test-secret"},
                },
            }
        )
        built: asyncio.Queue[tuple[DeviceContext, ToneReply, RecordingMcpPeer]] = asyncio.Queue()

        async def factory(context: DeviceContext) -> Pipeline:
            station = ToneReply(REPLY_SECONDS)
            peer = RecordingMcpPeer(context.transport, context.session_id)
            context.transport.set_mcp_peer(context.session_id, peer)
            built.put_nowait((context, station, peer))
            return Pipeline([station], session_id=context.session_id)

        server = VixioServer(config, factory)
        await server.start()
        servers.append(server)

        messages: list[dict[str, Any]] = []
        queued_at_stop: list[int] = []

        async def on_message(message: dict[str, Any]) -> None:
            messages.append(message)
            if message.get("type") == "tts" and message.get("state") == "stop":
                queued_at_stop.append(len(client.output_audio_queue))

        client = XiaoZhiWebsocket(message_handler_callback=on_message, ota_url=server.ota.url)
        clients.append(client)
        volume_calls: list[dict[str, Any]] = []
        await client.set_mcp_tool(_sdk_tools(volume_calls))
        assert await client.init_connection(DEVICE_MAC), "the sdk could not connect (see its log)"
        context, station, peer = await asyncio.wait_for(built.get(), 3)
        return SdkSession(server, client, context, station, peer, messages, queued_at_stop, volume_calls)

    yield connect
    for client in clients:
        await client.close()
    for server in servers:
        await server.stop()


@pytest.fixture
def sdk_errors(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The sdk swallows its own exceptions (a missing key, an undecodable packet) into ERROR logs."""
    caplog.set_level(logging.WARNING, logger="xiaozhi_sdk")

    def errors() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "xiaozhi_sdk" and r.levelno >= logging.ERROR]

    return errors


@pytest.mark.parametrize("auth", [True, False], ids=["auth-on", "auth-off"])
async def test_sdk_finds_the_server_through_ota_and_completes_the_handshake(
    connect_sdk: Connect, sdk_errors: Callable[[], list[str]], auth: bool
) -> None:
    session = await connect_sdk(auth=auth)
    client, server = session.client, session.server

    # The sdk was given only the OTA URL: the WebSocket URL and token came from the OTA reply.
    assert client.url == f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"
    assert bool(client.websocket_token) is auth
    identity = session.context.identity
    assert identity.device_id == DEVICE_MAC.lower() and identity.client_id == client.client_id
    assert identity.token == client.websocket_token

    # hello: the sdk took our session id and audio parameters (it keys its decoder on them).
    assert client.session_id == session.context.session_id
    assert session.context.features.get("mcp") is True
    assert client.audio_opus.xiaozhi_out_sample_rate == DOWNLINK_RATE

    # Right after hello the sdk opens the mic in realtime mode.
    connection = server.transport.connections[client.session_id]
    assert connection.listening and connection.mode == "realtime"
    assert sdk_errors() == []


async def test_mcp_initialize_list_and_call_reach_the_sdk_tools(
    connect_sdk: Connect, sdk_errors: Callable[[], list[str]]
) -> None:
    session = await connect_sdk()
    peer = session.peer

    initialize = await peer.request(
        1,
        "initialize",
        {
            "protocolVersion": "2024-11-05",
            # The sdk reads capabilities.vision.{url,token} unconditionally; without them it never answers.
            "capabilities": {"vision": {"url": "http://127.0.0.1/x", "token": "t"}},
            "clientInfo": {"name": "vixio", "version": "test"},
        },
    )
    assert initialize["jsonrpc"] == "2.0"
    result = initialize["result"]
    assert result["protocolVersion"] == "2024-11-05"
    assert "tools" in result["capabilities"]
    assert set(result["serverInfo"]) >= {"name", "version"}
    assert session.client.explain_url == "http://127.0.0.1/x"  # the sdk took our vision endpoint

    await peer.notify("notifications/initialized")
    listing = await peer.request(2, "tools/list", {"cursor": ""})
    tools = {tool["name"]: tool for tool in listing["result"]["tools"]}
    assert set(tools) == {"self.get_device_status", "self.audio_speaker.set_volume"}
    assert tools["self.audio_speaker.set_volume"]["inputSchema"]["required"] == ["volume"]
    assert tools["self.audio_speaker.set_volume"]["inputSchema"]["properties"]["volume"]["type"] == "integer"
    assert tools["self.get_device_status"]["inputSchema"] == {"type": "object", "properties": {}}
    assert all(set(tool) == {"name", "description", "inputSchema"} for tool in tools.values())
    assert "nextCursor" not in listing["result"]  # the sdk returns every tool in one page

    called = await peer.request(3, "tools/call", {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}})
    assert called["result"] == {"content": [{"type": "text", "text": '{"volume": 30}'}], "isError": False}
    assert session.volume_calls == [{"volume": 30}]

    # MCP never reaches the pipeline, and nothing but the three replies came back.
    assert [payload["id"] for payload in peer.received] == [1, 2, 3]
    assert session.station.heard == []
    assert sdk_errors() == []


async def test_typed_text_is_answered_with_speech_the_sdk_decodes(
    connect_sdk: Connect, sdk_errors: Callable[[], list[str]]
) -> None:
    session = await connect_sdk()
    client = session.client

    assert await client.send_text("hello vixio")
    await session.wait_for("tts", "stop", timeout=5)

    assert session.station.heard == ["hello vixio"]
    turn = [(m["type"], m.get("state"), m.get("text")) for m in session.messages]
    assert turn == [
        ("stt", None, "hello vixio"),
        ("tts", "start", None),
        ("tts", "sentence_start", "You said: hello vixio"),
        ("tts", "stop", None),
    ]

    # The sdk queues one decoded 60 ms frame (an int16 array at its output rate) per packet.
    frames = list(client.output_audio_queue)
    assert session.queued_frames_at_tts_stop == [len(frames)]  # every packet came before `tts stop`
    frame_samples = DOWNLINK_RATE * 60 // 1000
    assert all(frame.dtype == np.int16 and frame.shape == (frame_samples,) for frame in frames)
    expected = round(REPLY_SECONDS / 0.060)
    assert expected <= len(frames) <= expected + 1
    audio = np.concatenate(frames).astype(np.float64)
    assert np.sqrt(np.mean(audio**2)) > 2000  # the tone (amplitude 8000), not silence
    spectrum = np.abs(np.fft.rfft(audio))
    peak_hz = np.fft.rfftfreq(len(audio), 1 / DOWNLINK_RATE)[np.argmax(spectrum)]
    assert abs(peak_hz - TONE_HZ) < 5
    assert sdk_errors() == []
