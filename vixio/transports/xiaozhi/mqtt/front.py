"""Xiaozhi devices over MQTT + UDP, served by the WebSocket transport's own sessions.

    device ── MQTT (broker.py) ── hello ──► front: a session per audio channel ──► XiaozhiTransport
          ◄── PUBLISH on its subscribe topic ─ channel.py ◄── the session's messages
          ══ UDP (udp.py) AES-CTR Opus ═══► channel.py ══► the same session's audio

A device stays connected to the broker while idle (its keep-alive, 240 s by default); a `hello`
with `transport: "udp"` opens an audio session (a new hello replaces the previous one, as the
firmware resets its sequence numbers on every server hello), `goodbye` with that session's id
closes it, and so does the device's MQTT connection going away. `push_to_idle_device` sends any
JSON message to a connected device, in a session or not: the channel reminders and `notify`
(firmware 2.5) ride on.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

from loguru import logger

from vixio.config.mqtt import MqttConfig
from vixio.core.json_limits import JsonTooDeep, loads_bounded
from vixio.core.log_throttle import LogThrottle
from vixio.metrics.instruments import MQTT_REFUSED
from vixio.transports.xiaozhi.mqtt.audio_packets import AudioCipher, new_key, new_nonce
from vixio.transports.xiaozhi.mqtt.broker import DeviceLink, EmbeddedBroker
from vixio.transports.xiaozhi.mqtt.channel import MqttUdpChannel
from vixio.transports.xiaozhi.mqtt.credentials import MqttCredentials
from vixio.transports.xiaozhi.mqtt.external import ExternalBroker
from vixio.transports.xiaozhi.mqtt.ownership import Claim, DeviceOwnership, Release
from vixio.transports.xiaozhi.mqtt.udp import AudioSocket, open_audio_socket
from vixio.transports.xiaozhi.websocket.transport import XiaozhiTransport

HELLO_INTERVAL = 1.0
"""Seconds between two sessions a device may open (the firmware opens one per wake word or button
press); a hello sooner is dropped and counted (`vixio_mqtt_refused{reason="hello_flood"}`)."""


class MqttFront:
    """The embedded broker and the UDP socket, feeding `transport`'s sessions."""

    def __init__(
        self, config: MqttConfig, transport: XiaozhiTransport, credentials: MqttCredentials, port_offset: int = 0
    ) -> None:
        """`port_offset`: added to the UDP ports (worker N of an external broker's instance listens
        on `udp_port + N`)."""
        self.config = config
        self.port_offset = port_offset
        self.transport = transport
        self.credentials = credentials
        self.broker: EmbeddedBroker | ExternalBroker = (
            EmbeddedBroker(config, credentials, self._on_message, self._on_gone)
            if config.broker_url is None
            else ExternalBroker(config, credentials, self._on_message, self._on_gone)
        )
        self.audio: AudioSocket | None = None
        self.channels: dict[str, MqttUdpChannel] = {}
        """The open audio session of each device, by device id."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._ignored = LogThrottle(first=3, every=30.0)
        self.accepting = True
        """False while the server drains: a hello opens no new session (the devices stay connected)."""
        self._hellos: dict[str, float] = {}
        """When each connected device last opened a session: a hello flood must not build a pipeline each."""
        self.ownership: DeviceOwnership | None = None
        """Which devices this process serves when other instances share the external broker (`share_broker`)."""

    async def start(self) -> None:
        port = self.config.udp_port + self.port_offset if self.config.udp_port else 0
        self.audio = await open_audio_socket(self.config.host, port, self.config.max_audio_bytes)
        await self.broker.start()
        if self.ownership is not None:
            self.ownership.start()
        where = (
            f"embedded broker on {self.config.host}:{self.broker.port}"
            if self.config.broker_url is None
            else f"the broker at {self.config.broker_url.split('@')[-1]}"
        )
        logger.info("MQTT: {}, UDP audio on {}:{}", where, self.config.host, self.audio.port)

    async def stop(self) -> None:
        for channel in list(self.channels.values()):
            channel.end(send_goodbye=True)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        if self.ownership is not None:
            await self.ownership.stop()
        await self.broker.stop()
        if self.audio is not None and self.audio.transport is not None:
            self.audio.transport.close()

    @property
    def broker_port(self) -> int:
        return self.broker.port

    @property
    def udp_port(self) -> int:
        assert self.audio is not None
        return self.audio.port

    def ota_section(self, device_id: str, client_id: str, host: str) -> dict[str, Any]:
        """The OTA reply's `mqtt` object for a pinned, admitted device that reached OTA at `host`."""
        endpoint = self.config.device_endpoint(host, self.broker_port)
        return self.credentials.issue(device_id, client_id, endpoint, self.config.keepalive)

    def reachable(self, device_id: str) -> bool:
        """Whether `device_id` is connected to this process's broker now."""
        return device_id in self.broker.links

    async def push_to_idle_device(self, device_id: str, message: dict[str, Any]) -> bool:
        """Deliver `message` (a JSON object with a string `type`, e.g. firmware 2.5's
        `{"type": "notify", "audio_url": ..., "subtitles": [{"start_ms": 0, "text": ...}]}`) to
        the device over MQTT, whether it is idle or in a session; True once it is written to the
        device's connection, False when the device is not connected to this broker (WebSocket-only,
        offline, or on another process: VixioServer.push_to_idle_device asks the others)."""
        if not isinstance(message.get("type"), str):
            raise TypeError("a pushed message needs a string `type` (the firmware ignores it otherwise)")
        payload = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        return self.broker.deliver(device_id, payload)

    # --- device -> server -------------------------------------------------------------------

    def share_broker(self, claim: Claim, release: Release, holder: str) -> None:
        """Other instances use the same external broker: serve only the devices this process
        (`holder`) claims at their hello (ownership.py)."""
        self.ownership = DeviceOwnership(claim, release, holder, lambda: list(self.channels))

    def _on_message(self, link: DeviceLink, payload: bytes) -> None:
        device_id = link.identity.device_id
        try:
            text = payload.decode("utf-8")
            message = loads_bounded(text, self.transport.config.max_json_depth)
        except (UnicodeDecodeError, ValueError, JsonTooDeep):
            if self.ownership is None or self.ownership.holds(device_id):
                self._ignore(device_id, "a payload that is not JSON")
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if self.ownership is None:
            self._handle(link, text, message, kind)
        else:
            self.ownership.offer(device_id, kind == "hello", lambda: self._handle(link, text, message, kind))

    def _handle(self, link: DeviceLink, text: str, message: Any, kind: Any) -> None:
        device_id = link.identity.device_id
        channel = self.channels.get(device_id)
        if kind == "hello":
            if not self.accepting:
                self._ignore(device_id, "a hello while the server is stopping")
                return
            now = time.monotonic()
            if now - self._hellos.get(device_id, -HELLO_INTERVAL) < HELLO_INTERVAL:
                MQTT_REFUSED.labels("hello_flood").inc()
                self._ignore(device_id, f"a hello within {HELLO_INTERVAL:g} s of the last one")
                return
            self._hellos[device_id] = now
            if channel is not None:  # a new audio channel: the firmware reset its sequences
                channel.end(send_goodbye=False)
            self._open_session(link, message)
        elif kind == "goodbye":
            if channel is not None and message.get("session_id") == channel.session_id:
                channel.end(send_goodbye=False)
        elif channel is None:
            self._ignore(device_id, f"{str(kind)[:40]!r} outside an audio session")
        elif not channel.incoming_text(text):
            self._ignore(device_id, "a message while its session's queue is full")

    def _ignore(self, device_id: str, what: str) -> None:
        if self._ignored.hit() is not None:
            logger.bind(device=device_id, component="mqtt").info("ignored {} from {}", what, device_id)

    def _on_gone(self, link: DeviceLink) -> None:
        self._hellos.pop(link.identity.device_id, None)
        if self.ownership is not None:
            self.ownership.gone(link.identity.device_id)
        channel = self.channels.get(link.identity.device_id)
        if channel is not None:
            channel.end(send_goodbye=False)

    def _open_session(self, link: DeviceLink, hello: dict[str, Any]) -> None:
        assert self.audio is not None
        ssrc = secrets.randbits(32)
        while ssrc in self.audio.sessions:
            ssrc = secrets.randbits(32)
        cipher = AudioCipher(new_key(), new_nonce(ssrc))
        local = link.local_host
        udp_block = {
            "server": self.config.public_host or local,
            "port": self.config.public_udp_port + self.port_offset if self.config.public_udp_port else self.udp_port,
            "key": cipher.key.hex(),
            "nonce": cipher.nonce.hex(),
        }
        channel = MqttUdpChannel(
            link.identity,
            lambda data: self.broker.deliver(link.identity.device_id, data),
            cipher,
            udp_block,
            self.audio.sendto,
            link.peer_host,
            (local, self.udp_port),
        )
        channel.on_closed = self._closed
        self.channels[link.identity.device_id] = channel
        self.audio.sessions[ssrc] = channel
        # UDP carries bare Opus: the session is served as binary protocol 1 whatever `version` the hello names.
        channel.incoming_text(json.dumps({**hello, "version": 1}))
        task = asyncio.create_task(self.transport.serve_channel(channel), name=f"vixio-mqtt-{link.identity.device_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _closed(self, channel: MqttUdpChannel) -> None:
        device_id = channel.vixio_identity.device_id
        if self.channels.get(device_id) is channel:
            del self.channels[device_id]
        if self.audio is not None:
            self.audio.sessions.pop(channel.cipher.ssrc, None)
