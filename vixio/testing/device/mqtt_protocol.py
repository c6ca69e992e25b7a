"""The simulated device's MQTT + UDP protocol layer (FW `main/protocols/mqtt_protocol.cc`, 2.4.2).

The same surface as protocol.py's WebSocket layer, so core.py drives either. What the firmware
does and this copies:

- one MQTT connection (its own client: paho-mqtt through aiomqtt, MQTT 3.1.1, clean session,
  QoS 0 publishes) made from the OTA `mqtt` settings and kept while idle; it never SUBSCRIBEs
  and handles whatever arrives on its connection;
- `open` publishes the hello (`transport: "udp"`, `version: 3`) and waits 10 s for a server
  hello with `transport: "udp"` and a `udp` block whose key and nonce are 16 bytes each; every
  server hello resets both sequence numbers;
- audio: the header is the server nonce with length, timestamp (0: no server AEC) and sequence
  written in, AES-CTR from that header; a received packet is dropped unless its type is 0x01,
  its length matches and its sequence is above the last one accepted (`drops` counts them);
- `close` sends `goodbye` and closes the UDP socket; a server `goodbye` with this session's id
  closes it without answering; a `goodbye` naming another session is ignored.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger

from vixio.testing.device.errors import DeviceDisconnected, DeviceError, HelloError
from vixio.testing.device.protocol import (
    CHANNEL_TIMEOUT_S,
    DEFAULT_FRAME_DURATION_MS,
    DEFAULT_SAMPLE_RATE,
)
from vixio.testing.device.recording import DeviceRecording, SentMessage
from vixio.transports.xiaozhi.mqtt.audio_packets import HEADER_BYTES, crypt

FIRMWARE_DEFAULT_PORT = 8883
"""An endpoint without a port: the firmware dials 8883 (TLS, public CA bundle)."""


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Callable[[bytes], None]) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.on_datagram(data)


class DeviceMqttProtocol:
    """One device's MQTT connection and its UDP audio channel."""

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
        self.device_id = device_id
        self.client_id = client_id
        self.settings: dict[str, Any] = {}
        """The OTA `mqtt` object (endpoint, client_id, username, password, publish_topic, keepalive)."""
        self.url: str | None = None
        self.token = ""
        self.version = 1
        """UDP payloads are bare Opus (core.py unpacks downlink frames with this)."""
        self.session_id = ""
        self.server_hello: dict[str, Any] | None = None
        self.server_sample_rate = DEFAULT_SAMPLE_RATE
        self.server_frame_duration = DEFAULT_FRAME_DURATION_MS
        self.close_code: int | None = None
        self.close_reason = ""
        self.last_incoming = clock()
        self.drops: dict[str, int] = {}
        """Downlink UDP packets dropped, by reason (type, length, sequence, no_channel)."""
        self.timestamp = 0
        """Uplink header timestamp: 0 unless the firmware is built with server AEC."""
        self._recording, self._clock = recording, clock
        self._on_json, self._on_binary, self._on_closed, self._report = on_json, on_binary, on_closed, report
        self._client: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._key = b""
        self._nonce = b""
        self._udp_address: tuple[str, int] | None = None
        self.local_sequence = 0
        self.remote_sequence = 0
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self._log = logger.bind(component="SimulatedDevice", device=device_id)

    # --- MQTT -------------------------------------------------------------------------------

    @property
    def mqtt_connected(self) -> bool:
        return self._client is not None

    async def start(self, timeout: float = 10.0) -> None:
        """Connect to the broker with the OTA settings (`StartMqttClient`)."""
        import aiomqtt  # the `mqtt` extra

        if self._client is not None:
            return
        endpoint = str(self.settings.get("endpoint", ""))
        if not endpoint:
            raise DeviceError("no MQTT endpoint: run OTA against a server with `mqtt.enabled`")
        host, _, port = endpoint.partition(":")
        keepalive = self.settings.get("keepalive", 240)
        client = aiomqtt.Client(
            host,
            int(port) if port else FIRMWARE_DEFAULT_PORT,
            identifier=str(self.settings.get("client_id", "")),
            username=str(self.settings.get("username", "")),
            password=str(self.settings.get("password", "")),
            keepalive=int(keepalive) if isinstance(keepalive, int) else 240,
            clean_session=True,
            timeout=timeout,
        )
        try:
            await client.__aenter__()
        except aiomqtt.MqttError as exc:
            raise DeviceError(f"MQTT connect to {endpoint} failed: {exc}") from exc
        self._client = client
        self._reader = asyncio.create_task(self._read_loop(client), name=f"device-{self.device_id}-mqtt")

    async def shutdown(self) -> None:
        """Leave the broker (a power-off): the audio channel goes too, without goodbye."""
        self._close_udp()
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.__aexit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - already gone: the broker dropped it
                self._log.debug("MQTT disconnect: {}", exc)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None

    async def publish_raw(self, topic: str, payload: str | bytes) -> None:
        """Publish anything anywhere (for tests of what the broker refuses)."""
        if self._client is None:
            raise DeviceDisconnected("not connected to the broker")
        import aiomqtt

        try:
            await self._client.publish(topic, payload, qos=0)
        except aiomqtt.MqttError as exc:
            raise DeviceDisconnected(f"the broker closed the connection ({exc})") from exc

    async def _read_loop(self, client: Any) -> None:
        import aiomqtt

        try:
            async for message in client.messages:
                self.last_incoming = self._clock()
                await self._on_text(bytes(message.payload))
        except aiomqtt.MqttError:
            pass
        except Exception as exc:  # noqa: BLE001 - a simulator bug must fail the test, not hang it
            self._log.exception("MQTT receive loop crashed")
            self._report(f"simulated device crashed: {exc!r}", True)
        finally:
            if self._client is client:
                self._client = None
                self._close_udp()

    async def _on_text(self, payload: bytes) -> None:
        try:
            data = json.loads(payload)
        except ValueError:
            self._report(f"non-JSON MQTT message ignored: {payload[:80]!r}", False)
            return
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            self._report("MQTT message without a string `type` ignored", False)
            return
        if data["type"] == "hello":
            self._parse_server_hello(data)
        elif data["type"] == "goodbye":
            if data.get("session_id") == self.session_id and self._udp is not None:
                self._close_udp()
                self._on_closed()
            return
        await self._on_json(data)

    def _parse_server_hello(self, data: dict[str, Any]) -> None:
        if data.get("transport") != "udp":
            self._report(f"server hello transport {data.get('transport')!r}: the MQTT firmware ignores it", False)
            return
        if isinstance(data.get("session_id"), str):
            self.session_id = data["session_id"]
        params = data.get("audio_params")
        if isinstance(params, dict):
            if isinstance(params.get("sample_rate"), int):
                self.server_sample_rate = params["sample_rate"]
            if isinstance(params.get("frame_duration"), int):
                self.server_frame_duration = params["frame_duration"]
        udp = data.get("udp")
        try:
            assert isinstance(udp, dict) and isinstance(udp.get("server"), str)
            port = udp.get("port")
            assert isinstance(port, int) and 0 < port <= 0xFFFF
            key, nonce = bytes.fromhex(udp["key"]), bytes.fromhex(udp["nonce"])
            assert len(key) == 16 and len(nonce) == 16
        except (AssertionError, KeyError, TypeError, ValueError):
            self._report("server hello without a valid `udp` block: the firmware logs it and times out", False)
            return
        self._key, self._nonce, self._udp_address = key, nonce, (udp["server"], port)
        self.local_sequence = self.remote_sequence = 0
        self.server_hello = data
        if self._hello is not None and not self._hello.done():
            self._hello.set_result(data)

    # --- the audio channel (same surface as protocol.DeviceProtocol) ------------------------

    @property
    def connected(self) -> bool:
        """The audio channel is open (`IsAudioChannelOpened`)."""
        return self._udp is not None

    def timed_out(self) -> bool:
        return self.connected and self._clock() - self.last_incoming > CHANNEL_TIMEOUT_S

    async def open(self, hello: dict[str, Any], hello_timeout: float) -> dict[str, Any]:
        if self._client is None:
            await self.start(hello_timeout)
        self.session_id, self.server_hello = "", None
        self._hello = asyncio.get_running_loop().create_future()
        await self.send_json(hello)
        try:
            server_hello = await asyncio.wait_for(asyncio.shield(self._hello), hello_timeout)
        except TimeoutError:
            raise HelloError(f'no server hello with transport "udp" within {hello_timeout:g} s') from None
        assert self._udp_address is not None
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self._on_datagram), remote_addr=self._udp_address
        )
        self.last_incoming = self._clock()
        return server_hello

    def destroy(self) -> None:
        """A reboot: the UDP socket goes without goodbye (the MQTT connection is dropped by `shutdown`)."""
        if self._close_udp():
            self._on_closed()

    async def close(self, *, graceful: bool = False) -> None:
        """`CloseAudioChannel(true)`: goodbye, then the UDP socket is closed."""
        if self._udp is None:
            return
        self._close_udp()
        if self._client is not None:
            await self.send_json(self.message("goodbye"))
        self._on_closed()

    def _close_udp(self) -> bool:
        udp, self._udp = self._udp, None
        if udp is not None:
            udp.close()
        return udp is not None

    def message(self, type: str, **fields: Any) -> dict[str, Any]:
        return {"session_id": self.session_id, "type": type, **fields}

    async def send_json(self, data: dict[str, Any]) -> None:
        await self.send_raw(json.dumps(data, separators=(",", ":"), ensure_ascii=False))
        self._recording.sent.append(SentMessage(self._clock(), data))

    async def send_raw(self, data: str | bytes) -> None:
        """Text is published on the device's topic; bytes go out as one UDP audio packet."""
        if isinstance(data, bytes):
            await self.send_audio(data)
            return
        topic = str(self.settings.get("publish_topic", ""))
        await self.publish_raw(topic, data)

    async def send_audio(self, opus: bytes, timestamp_ms: int = 0) -> None:
        """One Opus packet as the firmware's `SendAudio` builds it. The UDP header's timestamp
        is not modelled (`timestamp_ms` is ignored): MQTT downlink frames carry none to echo."""
        if self._udp is None:
            raise DeviceDisconnected("the audio channel is closed; connect() first")
        self._udp.sendto(self.seal(opus))
        self._recording.uplink_stamps.append(0)

    def seal(self, opus: bytes, sequence: int | None = None) -> bytes:
        """The encrypted packet for `opus` (the next sequence unless one is given, for tests)."""
        if sequence is None:
            self.local_sequence += 1
            sequence = self.local_sequence
        header = bytearray(self._nonce)
        struct.pack_into(">H", header, 2, len(opus))
        struct.pack_into(">II", header, 8, self.timestamp, sequence)
        return bytes(header) + crypt(self._key, bytes(header), opus)

    def send_datagram(self, datagram: bytes) -> None:
        """Send any bytes on the audio socket (replays, garbage, tests)."""
        if self._udp is None:
            raise DeviceDisconnected("the audio channel is closed")
        self._udp.sendto(datagram)

    def _on_datagram(self, data: bytes) -> None:
        if len(data) < HEADER_BYTES or data[0] != 0x01:
            self._drop("type")
            return
        length, sequence = struct.unpack_from(">H", data, 2)[0], struct.unpack_from(">I", data, 12)[0]
        if len(data) != HEADER_BYTES + length:
            self._drop("length")
            return
        if sequence <= self.remote_sequence:
            self._drop("sequence")
            return
        self.remote_sequence = sequence
        self.last_incoming = self._clock()
        self._on_binary(crypt(self._key, data[:HEADER_BYTES], data[HEADER_BYTES:]))

    def _drop(self, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
