"""One MQTT + UDP audio session, in the shape the Xiaozhi transport drives a WebSocket with.

XiaozhiTransport serves a session over anything with `recv`, `send`, `close` (and the few
attributes its handshake code reads), so the session, its pipeline, device tools, downlink
pacing and codec are the WebSocket transport's own. What differs is here: JSON goes out as a
PUBLISH on the device's subscribe topic and comes in from its publish topic (front.py routes
it), Opus goes both ways as AES-CTR UDP packets (audio_packets.py), the server hello carries
the `udp` block, and closing sends `goodbye` (the firmware closes its UDP channel when the
`session_id` matches).

The device hello's `version` (3 from the firmware's MQTT protocol) names WebSocket binary
framing; UDP payloads are bare Opus, so the hello is handed to the session as version 1.

Downlink audio needs the device's UDP address, which its first uplink packet tells (a NAT
needs that packet anyway): the firmware streams its microphone from `listen start` on, so a
reply always follows some. Frames sent before are dropped and counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from vixio.core.transport import ConnectionClosed
from vixio.metrics.instruments import UDP_DROPPED
from vixio.transports.xiaozhi.mqtt.audio_packets import AudioCipher
from vixio.transports.xiaozhi.session.auth import DeviceIdentity

READ_QUEUE = 128
"""Messages and audio packets waiting for the session's reader (8 s of audio); more are dropped."""


class MqttUdpChannel:
    """A session's two channels: `publish` (JSON to the device) and the UDP socket (audio)."""

    request = None
    """No HTTP request: the transport's vision URL falls back to its configured host."""
    audio_apart = True
    """Audio (UDP, straight to the server) can overtake `listen start` (MQTT, through the broker):
    the session holds it briefly (session/early_audio.py)."""

    def __init__(
        self,
        identity: DeviceIdentity,
        publish: Callable[[bytes], bool],
        cipher: AudioCipher,
        udp_block: dict[str, Any],
        sendto: Callable[[bytes, tuple[str, int]], None],
        peer_host: str | None,
        local_address: tuple[str, int],
    ) -> None:
        self.vixio_identity = identity
        self._publish = publish
        self.cipher = cipher
        self._udp_block = udp_block
        self._sendto = sendto
        self.peer_host = peer_host
        """The MQTT connection's address: UDP packets from another host are not this device's
        (None with an external broker, which does not tell; then the first sender is pinned)."""
        self.udp_address: tuple[str, int] | None = None
        self.local_address = local_address
        self.remote_address = (peer_host or "?", 0)
        self.session_id = ""
        """Set when the transport sends its hello."""
        self.receiver: Callable[[bytes], bool] | None = None
        """The transport's inline path for audio (set by front.py once the session exists)."""
        self.parked = False
        self._reads: asyncio.Queue[bytes | str | None] = asyncio.Queue(READ_QUEUE)
        self.closed = False
        self.on_closed: Callable[[MqttUdpChannel], None] | None = None

    # --- device -> server -----------------------------------------------------------------------

    def incoming_text(self, text: str) -> bool:
        """A JSON message from the device's publish topic; False when dropped (queue full, closed)."""
        if self.closed or self._reads.full():
            return False
        self._reads.put_nowait(text)
        return True

    def incoming_audio(self, payload: bytes) -> None:
        """A decrypted Opus packet, straight to the session when its reader waits and nothing is
        queued before it (order), else queued."""
        if self.closed:
            return
        if self.parked and self._reads.empty() and self.receiver is not None and self.receiver(payload):
            return
        if self._reads.full():
            UDP_DROPPED.labels("overflow").inc()
            return
        self._reads.put_nowait(payload)

    async def recv(self) -> bytes | str:
        self.parked = True
        try:
            item = await self._reads.get()
        finally:
            self.parked = False
        if item is None:
            self._reads.put_nowait(None)  # every later read ends too
            raise ConnectionClosed(self.session_id)
        return item

    # --- server -> device -----------------------------------------------------------------------

    async def send(self, data: bytes | str) -> None:
        self.send_now(data)

    def send_now(self, data: bytes | str) -> None:
        if self.closed:
            raise ConnectionClosed(self.session_id)
        if isinstance(data, str):
            self._send_text(data)
        elif self.udp_address is None:
            UDP_DROPPED.labels("no_address").inc()
        else:
            self._sendto(self.cipher.seal(data), self.udp_address)

    async def send_many(self, frames: list[bytes | str]) -> None:
        for frame in frames:
            self.send_now(frame)

    def writer_now(self) -> Callable[[list[bytes | str]], None] | None:
        """The transport's write-without-a-task path: always available (UDP and the broker's
        writer buffer without waiting)."""
        return None if self.closed else self._write_frames

    def _write_frames(self, frames: list[bytes | str]) -> None:
        try:
            for frame in frames:
                self.send_now(frame)
        except ConnectionClosed:
            pass  # the device's MQTT connection is gone: the session ends through front.py

    def _send_text(self, text: str) -> None:
        if text.startswith('{"type":"hello"'):
            hello = json.loads(text)
            hello["transport"] = "udp"  # the firmware ignores a hello whose transport is not "udp"
            hello["udp"] = self._udp_block
            self.session_id = str(hello.get("session_id", ""))
            text = json.dumps(hello, ensure_ascii=False, separators=(",", ":"))
        if not self._publish(text.encode()):
            raise ConnectionClosed(self.session_id)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """End the session: `goodbye` unless the device said it (or its MQTT connection is gone)."""
        self.end(send_goodbye=True)

    def end(self, *, send_goodbye: bool) -> None:
        if self.closed:
            return
        if send_goodbye and self.session_id:
            self._publish(json.dumps({"session_id": self.session_id, "type": "goodbye"}).encode())
        self.closed = True
        while self._reads.full():
            self._reads.get_nowait()
        self._reads.put_nowait(None)
        if self.on_closed is not None:
            self.on_closed(self)
