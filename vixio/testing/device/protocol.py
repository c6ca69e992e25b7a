"""The simulated device's WebSocket protocol layer (FW `main/protocols/websocket_protocol.cc`).

Handshake headers, the hello exchange, the session id echoed in every message, binary
framing and the 120 s silence rule live here; what the device *does* with messages
(states, playback, MCP) lives in `core.py`, as in the firmware's Application.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from vixio.testing.device.errors import DeviceDisconnected, DeviceError, HelloError
from vixio.testing.device.recording import DeviceRecording, SentMessage
from vixio.transports.xiaozhi.protocol.codec import UPLINK_SAMPLE_RATE
from vixio.transports.xiaozhi.protocol.framing import pack

CHANNEL_TIMEOUT_S = 120.0
"""A channel with nothing received for 120 s counts as dead (`Protocol::IsTimeout`)."""
DEFAULT_SAMPLE_RATE = 24000
DEFAULT_FRAME_DURATION_MS = 60


class DeviceProtocol:
    """One device's WebSocket channel; reusable across open/close cycles."""

    def __init__(
        self,
        *,
        device_id: str,
        client_id: str,
        recording: DeviceRecording,
        clock: Callable[[], float],
        on_json: Callable[[dict[str, Any]], Awaitable[None]],
        on_binary: Callable[[bytes], None],
        on_closed: Callable[[], None],
        report: Callable[[str, bool], None],
    ) -> None:
        """Callbacks: `on_json` for every JSON object received (after hello parsing),
        `on_binary` for every binary message, `on_closed` once per closed channel, and
        `report(text, is_fault)` for server mistakes."""
        self.device_id = device_id
        self.client_id = client_id
        self.url: str | None = None
        self.token = ""
        self.version = 1
        """Binary protocol version, sent as `Protocol-Version` and in the hello."""
        self.session_id = ""
        self.server_hello: dict[str, Any] | None = None
        self.server_sample_rate = DEFAULT_SAMPLE_RATE
        self.server_frame_duration = DEFAULT_FRAME_DURATION_MS
        self.close_code: int | None = None
        self.close_reason = ""
        self.last_incoming = clock()
        self._recording = recording
        self._clock = clock
        self._on_json = on_json
        self._on_binary = on_binary
        self._on_closed = on_closed
        self._report = report
        self._ws: ClientConnection | None = None
        self._receive_task: asyncio.Task[None] | None = None
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self._log = logger.bind(component="SimulatedDevice", device=device_id)

    @property
    def connected(self) -> bool:
        """True while the socket is open."""
        return self._ws is not None

    def timed_out(self) -> bool:
        """True when the channel is open but silent for over 120 s; the firmware then reopens it."""
        return self.connected and self._clock() - self.last_incoming > CHANNEL_TIMEOUT_S

    def headers(self) -> dict[str, str]:
        """Handshake headers of `OpenAudioChannel`."""
        headers: dict[str, str] = {}
        if self.token:
            # A stored token gets a "Bearer " prefix unless it already contains a space.
            headers["Authorization"] = self.token if " " in self.token else f"Bearer {self.token}"
        headers["Protocol-Version"] = str(self.version)
        headers["Device-Id"] = self.device_id
        headers["Client-Id"] = self.client_id
        return headers

    async def open(self, hello: dict[str, Any], hello_timeout: float) -> dict[str, Any]:
        """Connect, send `hello` and return the server hello (HelloError after `hello_timeout`)."""
        if self.url is None:
            raise ValueError("no WebSocket URL (run OTA or pass ws_url)")
        try:
            ws = await connect(
                self.url,
                additional_headers=self.headers(),
                open_timeout=hello_timeout,
                # The firmware neither pings nor negotiates compression; never use a proxy.
                ping_interval=None,
                compression=None,
                proxy=None,
                max_size=4 * 2**20,
            )
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            raise DeviceError(f"cannot open WebSocket {self.url}: {exc!r}") from exc
        self._ws = ws
        self.session_id, self.server_hello = "", None
        self.server_sample_rate, self.server_frame_duration = DEFAULT_SAMPLE_RATE, DEFAULT_FRAME_DURATION_MS
        self.last_incoming = self._clock()
        self._hello = asyncio.get_running_loop().create_future()
        self._receive_task = asyncio.create_task(self._receive_loop(ws), name=f"device-{self.device_id}-recv")
        await self.send_json(hello)
        try:
            return await asyncio.wait_for(asyncio.shield(self._hello), hello_timeout)
        except TimeoutError:
            self._hello.cancel()
            self.destroy()
            raise HelloError(
                f'no server hello with transport "websocket" within {hello_timeout:g} s; a real device '
                "shows 'server timeout', goes idle and drops the socket"
            ) from None
        except DeviceError:
            self.destroy()
            raise

    def destroy(self) -> None:
        """Drop the socket without a close frame, as the firmware does."""
        if self._ws is not None:
            self._ws.transport.abort()

    async def close(self, *, graceful: bool = False) -> None:
        """Close the channel (with a close frame when `graceful`) and wait for the loop to end."""
        ws, task = self._ws, self._receive_task
        if ws is not None:
            if graceful:
                await ws.close()
            else:
                ws.transport.abort()
        if task is not None:
            await asyncio.wait({task}, timeout=5)

    def message(self, type: str, **fields: Any) -> dict[str, Any]:
        """A device message: the server's session id (or "") first, then `type` and `fields`."""
        return {"session_id": self.session_id, "type": type, **fields}

    async def send_json(self, data: dict[str, Any]) -> None:
        """Send compact JSON (like cJSON_PrintUnformatted) and record it."""
        await self.send_raw(json.dumps(data, separators=(",", ":"), ensure_ascii=False))
        self._recording.sent.append(SentMessage(self._clock(), data))

    async def send_audio(self, opus: bytes, timestamp_ms: int = 0) -> None:
        """Send one Opus packet in one binary message, framed for the negotiated version
        (`timestamp_ms` goes into a v2 header; v1 and v3 have no field for it)."""
        await self.send_raw(pack(opus, self.version, timestamp_ms=timestamp_ms))
        self._recording.uplink_stamps.append(timestamp_ms if self.version == 2 else 0)

    async def send_raw(self, data: str | bytes) -> None:
        """Send a text or binary message as is."""
        ws = self._ws
        if ws is None:
            raise DeviceDisconnected("the channel is closed; connect() first")
        try:
            await ws.send(data)
        except ConnectionClosed as exc:
            raise DeviceDisconnected(f"the server closed the WebSocket ({exc})") from exc

    async def _receive_loop(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                self.last_incoming = self._clock()
                if isinstance(message, str):
                    await self._on_text(message)
                else:
                    self._on_binary(message)
        except ConnectionClosed:
            pass
        except Exception as exc:  # a simulator bug must fail the test, not hang it
            self._log.exception("receive loop crashed")
            self._report(f"simulated device crashed: {exc!r}", True)
        finally:
            self.close_code, self.close_reason = ws.close_code, ws.close_reason or ""
            if self._ws is ws:
                self._ws = None
                self._resolve_hello(
                    DeviceDisconnected(
                        f"server closed the WebSocket before its hello (code {self.close_code}, {self.close_reason!r})"
                    )
                )
                self._on_closed()

    async def _on_text(self, text: str) -> None:
        try:
            data = json.loads(text)
        except ValueError:
            self._report(f"non-JSON text frame ignored: {text[:80]!r}", False)
            return
        if not isinstance(data, dict):
            self._report(f"JSON text frame that is not an object ignored: {text[:80]!r}", False)
            return
        if data.get("type") == "hello":
            self._parse_server_hello(data)
        await self._on_json(data)

    def _parse_server_hello(self, data: dict[str, Any]) -> None:
        # The firmware runs ParseServerHello for every hello, not only the first.
        transport = data.get("transport")
        if not isinstance(transport, str):
            fault = "server hello has no `transport`: firmware 2.4.2 dereferences a null pointer and reboots"
            self._report(fault, True)
            self._resolve_hello(HelloError(fault))
            self.destroy()
            return
        if transport != "websocket":
            problem = f"server hello transport is {transport!r}; the firmware ignores it and times out after 10 s"
            self._report(problem, False)
            self._resolve_hello(HelloError(problem))
            return
        params = data.get("audio_params")
        if isinstance(params, dict):
            rate, duration = params.get("sample_rate"), params.get("frame_duration")
            if isinstance(rate, int | float) and not isinstance(rate, bool):
                self.server_sample_rate = int(rate)
            if isinstance(duration, int | float) and not isinstance(duration, bool):
                self.server_frame_duration = int(duration)
        if isinstance(data.get("session_id"), str):
            self.session_id = data["session_id"]
        self.server_hello = data
        self._resolve_hello(data)

    def _resolve_hello(self, outcome: dict[str, Any] | DeviceError) -> None:
        future = self._hello
        if future is None or future.done():
            return
        if isinstance(outcome, DeviceError):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def client_hello(*, aec: bool, mcp: bool, mqtt: bool, protocol_version: int, frame_ms: int) -> dict[str, Any]:
    """The client hello exactly as the firmware's `GetHelloMessage` builds it (no glyph push, so no
    text_font). MqttProtocol::GetHelloMessage says version 3 and transport udp, whatever the
    WebSocket settings."""
    features: dict[str, Any] = {}
    if aec:
        features["aec"] = True
    if mcp:
        features["mcp"] = True
    features["glyph_push"] = False
    version, transport = (3, "udp") if mqtt else (protocol_version, "websocket")
    return {
        "type": "hello",
        "version": version,
        "features": features,
        "transport": transport,
        "audio_params": {
            "format": "opus",
            "sample_rate": UPLINK_SAMPLE_RATE,
            "channels": 1,
            "frame_duration": frame_ms,
        },
    }
