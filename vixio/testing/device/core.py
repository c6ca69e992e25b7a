"""The reacting half of the simulated Xiaozhi device (FW `main/application.cc`).

What firmware 2.4.2 does on its own: the OTA check, opening the channel, and the
device's answer to every server message. Rules kept on purpose: binary audio plays only
in `speaking`; at most 40 packets wait in the decode queue; `tts stop` leads to `idle` in
manual mode and to `listening` otherwise, and in auto mode `listen start` is re-sent once
playback has drained; a server hello without `transport` is a crash.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Literal

from loguru import logger

from vixio.testing.device.audio import ReceivedFrame, Speaker
from vixio.testing.device.errors import DeviceError
from vixio.testing.device.mcp import DeviceMcpServer
from vixio.testing.device.mqtt_protocol import DeviceMqttProtocol
from vixio.testing.device.ota import DeviceIdentity, OtaResult, board_client_id, random_device_id, run_ota, system_info
from vixio.testing.device.protocol import CHANNEL_TIMEOUT_S, DeviceProtocol, client_hello
from vixio.testing.device.recording import DeviceRecording, ReceivedMessage, SentMessage
from vixio.testing.device.tools import DeviceStatus, DeviceTool, default_tools
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder
from vixio.transports.xiaozhi.protocol.framing import FramingError, unpack

ListeningMode = Literal["auto", "manual", "realtime"]
DeviceState = Literal["idle", "connecting", "listening", "speaking"]

HELLO_TIMEOUT_S = 10.0
"""The firmware waits 10 s for the server hello, then shows "server timeout" and drops the socket."""
REBOOT_DELAY_S = 1.0
"""`self.reboot` replies first and restarts about a second later."""


class DeviceCore:
    """How the device reacts: OTA, channel, server messages, playback, MCP server.

    `SimulatedDevice` adds what a user (or test) does to the device and reads from it.
    """

    def __init__(
        self,
        *,
        ota_url: str | None = None,
        ws_url: str | None = None,
        token: str = "",
        device_id: str | None = None,
        client_id: str | None = None,
        protocol_version: int = 1,
        aec: bool = False,
        mcp: bool = True,
        listening_mode: ListeningMode = "auto",
        tools: list[DeviceTool] | tuple[DeviceTool, ...] = (),
        firmware_version: str = "2.4.2",
        board: str = "bread-compact-wifi",
        uplink_frame_ms: int = 60,
        clock: Callable[[], float] = time.monotonic,
        hello_timeout: float = HELLO_TIMEOUT_S,
        activation_poll_interval: float = 3.0,
        activation_error_interval: float = 10.0,
        language: str = "zh-CN",
        mqtt: bool = False,
    ) -> None:
        """Configure the device; nothing connects until `run_ota()` / `connect()`.

        `token` is what OTA would have stored (OTA replaces it); it is sent as
        `Authorization: Bearer <token>` only when non-empty. `client_id` defaults to the board's
        own (`board_client_id`: one per MAC, as in flash); another one is another board claiming the MAC.

        `mqtt=True` speaks MQTT + UDP as the firmware does when OTA hands out `mqtt`
        (mqtt_protocol.py): it needs `ota_url`, stays connected to the broker while idle
        (`shutdown()` leaves it), and sends `goodbye` when it closes its audio channel.

        `clock` timestamps everything and drives the playback model; sleeps use asyncio,
        so it must advance in real time (time.monotonic or the loop's time).
        """
        if protocol_version not in (1, 2, 3):
            raise ValueError(f"protocol_version must be 1, 2 or 3, got {protocol_version}")
        self.ota_url = ota_url
        self.device_id = device_id or random_device_id()
        self.client_id = client_id or board_client_id(self.device_id)
        self.aec = aec
        self.default_listening_mode: ListeningMode = listening_mode
        self.listening_mode: ListeningMode = listening_mode
        """The mode of the last `listen start`; decides where `tts stop` leads."""
        self.firmware_version = firmware_version
        self.board = board
        self.uplink_frame_ms = uplink_frame_ms
        self.hello_timeout = hello_timeout
        self._clock = clock
        self._identity = DeviceIdentity(self.device_id, self.client_id, board, firmware_version, language)
        self._activation_intervals = (activation_poll_interval, activation_error_interval)
        self._log = logger.bind(component="SimulatedDevice", device=self.device_id)

        self.state: DeviceState = "idle"
        self.ota: OtaResult | None = None
        self.status = DeviceStatus()
        """Volume, brightness, theme... as reported by `self.get_device_status`."""
        self.emotion: str | None = None
        self.stt_texts: list[str] = []
        self.sentences: list[str] = []
        self.alerts: list[dict[str, Any]] = []
        self.custom_messages: list[Any] = []
        self.warnings: list[str] = []
        """Server mistakes the firmware tolerates (ignored messages, unsupported values, ...)."""
        self.faults: list[str] = []
        """Server behaviour that would crash or hang a real device; should stay empty."""
        self.uplink_packets = 0
        self.reboot_requested = False
        self.on_message: Callable[[ReceivedMessage], None] | None = None
        """Called for every JSON message received, before the device acts on it."""

        self.recording = DeviceRecording()
        self.received: list[ReceivedMessage] = self.recording.received
        self.sent: list[SentMessage] = self.recording.sent
        self.audio_frames: list[ReceivedFrame] = self.recording.audio_frames
        self.mqtt = mqtt
        self.protocol: DeviceProtocol | DeviceMqttProtocol = (DeviceMqttProtocol if mqtt else DeviceProtocol)(
            device_id=self.device_id,
            client_id=self.client_id,
            recording=self.recording,
            clock=clock,
            on_json=self._on_json,
            on_binary=self._on_binary,
            on_closed=self._on_closed,
            report=self._report,
        )
        self.protocol.url, self.protocol.token = ws_url, token
        self.protocol.version = 1 if mqtt else protocol_version  # UDP carries bare Opus
        builtin = default_tools(self.status, lambda: system_info(self._identity), self._schedule_reboot)
        self._mcp = (
            DeviceMcpServer(
                [*builtin, *tools],
                board=board,
                firmware_version=firmware_version,
                send=self._send_mcp,
                device_id=self.device_id,
            )
            if mcp
            else None
        )
        self._speaker = Speaker(server_aec=aec)
        self._mic_encoder: OpusEncoder | None = None
        """The uplink encoder; one per channel, so its state runs across stream_audio calls."""
        self._relisten: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- channel

    @property
    def ws_url(self) -> str | None:
        """The WebSocket URL (given, or handed out by OTA)."""
        return self.protocol.url

    @property
    def token(self) -> str:
        """The token from OTA ("" means no Authorization header)."""
        return self.protocol.token

    @property
    def protocol_version(self) -> int:
        """Binary protocol version (1, 2 or 3); OTA `websocket.version` may change it."""
        return self.protocol.version

    @property
    def session_id(self) -> str:
        """The server hello's session id, echoed in every message ("" before a hello)."""
        return self.protocol.session_id

    @property
    def server_hello(self) -> dict[str, Any] | None:
        """The last server hello accepted."""
        return self.protocol.server_hello

    @property
    def server_sample_rate(self) -> int:
        """Downlink decoder rate from the server hello (default 24000)."""
        return self.protocol.server_sample_rate

    @property
    def connected(self) -> bool:
        """True while the WebSocket channel is open."""
        return self.protocol.connected

    @property
    def close_code(self) -> int | None:
        """Close code of the last channel (None if it was dropped without a close frame)."""
        return self.protocol.close_code

    async def run_ota(self) -> dict[str, Any]:
        """POST the OTA check (and activation) like a booting device; returns the OTA reply."""
        if not self.ota_url:
            raise ValueError("run_ota() needs ota_url")
        poll, error = self._activation_intervals
        self.ota = await run_ota(self.ota_url, self._identity, poll_interval=poll, error_interval=error, mqtt=self.mqtt)
        self.warnings.extend(self.ota.warnings)
        if self.ota.mqtt is not None and isinstance(self.protocol, DeviceMqttProtocol):
            self.protocol.settings = self.ota.mqtt
            return self.ota.reply
        self.protocol.url = self.ota.websocket_url
        if self.ota.token is not None:  # an omitted key keeps its stored value (NVS)
            self.protocol.token = self.ota.token
        if self.ota.protocol_version is not None:
            self.protocol.version = self.ota.protocol_version
        return self.ota.reply

    def hello_message(self) -> dict[str, Any]:
        """The client hello exactly as `GetHelloMessage` builds it (protocol.py `client_hello`)."""
        return client_hello(
            aec=self.aec,
            mcp=self._mcp is not None,
            mqtt=self.mqtt,
            protocol_version=self.protocol_version,
            frame_ms=self.uplink_frame_ms,
        )

    async def connect(self) -> dict[str, Any]:
        """Open the channel (running OTA first if only `ota_url` is known); returns the server hello.
        Raises HelloError when no usable hello arrives within `hello_timeout` (10 s)."""
        if self.connected and self.server_hello is not None:
            return self.server_hello
        hello = await self._open_channel()
        self._set_state("idle")
        return hello

    async def _open_channel(self) -> dict[str, Any]:
        unset = not self.protocol.settings if isinstance(self.protocol, DeviceMqttProtocol) else self.ws_url is None
        if unset:
            if not self.ota_url:
                raise ValueError("SimulatedDevice needs ota_url (or, over WebSocket, ws_url)")
            await self.run_ota()
        self._set_state("connecting")
        try:
            hello = await self.protocol.open(self.hello_message(), self.hello_timeout)
        except BaseException:
            self._set_state("idle")
            raise
        self._speaker.configure(self.protocol.server_sample_rate, self.protocol.server_frame_duration)
        self._mic_encoder = None
        return hello

    async def _ensure_channel(self) -> None:
        if self.protocol.timed_out():
            self._report(f"nothing received for over {CHANNEL_TIMEOUT_S:g} s: the firmware reopens the channel", False)
            await self.close()
        if not self.connected:
            await self.connect()

    async def close(self, *, graceful: bool = False) -> None:
        """Close the channel. The firmware destroys the socket without a close frame;
        `graceful=True` sends one."""
        self._cancel_relisten()
        if self._mcp is not None:
            await self._mcp.close()
        await self.protocol.close(graceful=graceful)
        self._set_state("idle")

    def _on_closed(self) -> None:
        # OnAudioChannelClosed: back to idle; the device never reconnects by itself.
        self._cancel_relisten()
        self._set_state("idle")
        self.recording.notify()

    # ---------------------------------------------------------------- server -> device

    async def _on_json(self, data: dict[str, Any]) -> None:
        message = ReceivedMessage(self._clock(), data, self.state)
        self.received.append(message)
        if self.on_message is not None:
            self.on_message(message)
        kind = data.get("type")
        if kind == "hello":
            if data is self.server_hello:  # accepted by the protocol layer; follow its audio params
                self._speaker.configure(self.protocol.server_sample_rate, self.protocol.server_frame_duration)
        elif kind == "tts":
            self._on_tts(data)
        elif kind == "stt":
            if isinstance(data.get("text"), str):
                self.stt_texts.append(data["text"])
        elif kind == "llm":
            if isinstance(data.get("emotion"), str):  # only the emotion is read
                self.emotion = data["emotion"]
        elif kind == "mcp":
            if self._mcp is None:
                self._report("mcp message ignored: this device announced no MCP support", False)
            else:
                await self._mcp.handle(data.get("payload"))
        elif kind == "system":
            if data.get("command") == "reboot":
                self._schedule_reboot(delay=0.0)
            else:
                self._report(f"system command {data.get('command')!r} not supported (only `reboot`)", False)
        elif kind == "alert":
            if all(isinstance(data.get(key), str) for key in ("status", "message", "emotion")):
                self.alerts.append(data)
                self.emotion = data["emotion"]
            else:
                self._report("alert ignored: `status`, `message` and `emotion` must all be strings", False)
        elif kind == "custom":
            self.custom_messages.append(data.get("payload"))
        elif kind == "goodbye" and not self.mqtt:
            self._report("`goodbye` is MQTT-only; the firmware ignores it on WebSocket (close the socket)", False)
        else:
            self._report(f"message type {kind!r} ignored", False)
        self.recording.notify()

    def _on_tts(self, data: dict[str, Any]) -> None:
        state = data.get("state")
        if state == "start":
            if self.state in ("idle", "listening"):
                # Entering speaking resets the decoder: queued packets are discarded.
                self._speaker.reset(self._clock())
                self._cancel_relisten()
                self._set_state("speaking")
            elif self.state == "connecting":
                self._report("`tts start` while connecting is ignored by the firmware", False)
        elif state == "stop":
            if self.state != "speaking":
                return
            if self.listening_mode == "manual":
                self._set_state("idle")
                return
            self._set_state("listening")
            if self.listening_mode == "auto":
                # Realtime keeps its audio processor running, so only auto sends a new listen start.
                self._relisten = asyncio.create_task(self._listen_after_drain())
        elif state == "sentence_start":
            if isinstance(data.get("text"), str):
                self.sentences.append(data["text"])
        else:
            self._report(f"tts state {state!r} ignored", False)

    async def _listen_after_drain(self) -> None:
        delay = self._speaker.queue.drained_at() - self._clock()
        if delay > 0:
            await asyncio.sleep(delay)
        if self.state == "listening" and self.connected:
            try:
                await self._send_listen_start("auto")
            except DeviceError as exc:
                self._log.info("listen start after playback not sent: {}", exc)

    def _on_binary(self, data: bytes) -> None:
        now = self._clock()
        try:
            frame = unpack(data, self.protocol_version)
        except FramingError as exc:
            self.audio_frames.append(ReceivedFrame(now, self.state, bytes(data), drop_reason="bad_framing"))
            self._report(f"binary frame dropped: {exc}", False)
            return
        record = ReceivedFrame(now, self.state, frame.payload, frame.frame_type, frame.timestamp_ms)
        self.audio_frames.append(record)
        record.drop_reason = "not_speaking" if self.state != "speaking" else self._speaker.play(record, now)
        record.played = record.drop_reason is None

    # ---------------------------------------------------------------- device -> server

    async def _send_mcp(self, payload: dict[str, Any]) -> None:
        await self.protocol.send_json(self.protocol.message("mcp", payload=payload))

    async def _send_listen_start(self, mode: ListeningMode) -> None:
        await self.protocol.send_json(self.protocol.message("listen", state="start", mode=mode))

    async def _send_packet(self, opus: bytes, timestamp_ms: int = 0) -> None:
        await self.protocol.send_audio(opus, timestamp_ms)
        self.uplink_packets += 1

    # ---------------------------------------------------------------- internals

    def _set_state(self, state: DeviceState) -> None:
        if state != self.state:
            self._log.debug("state {} -> {}", self.state, state)
            self.state = state
            self.recording.notify()

    def _cancel_relisten(self) -> None:
        task, self._relisten = self._relisten, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _report(self, message: str, fault: bool) -> None:
        if fault:
            self._log.error(message)
            self.faults.append(message)
        else:
            self._log.warning(message)
            self.warnings.append(message)

    def _schedule_reboot(self, delay: float = REBOOT_DELAY_S) -> None:
        self.reboot_requested = True

        def restart() -> None:
            self._log.info("rebooting: socket destroyed")
            self.protocol.destroy()

        asyncio.get_running_loop().call_later(delay, restart)
