"""vixio's embedded MQTT 3.1.1 broker: one connection per device, delivery per connection.

The firmware never sends SUBSCRIBE: it handles whatever arrives on its connection. A standard
broker delivers nothing to such a client, so this one is not a general pub/sub broker. It
authenticates each CONNECT with the credentials OTA issued (credentials.py), takes PUBLISH only
on the device's own publish topic (anything else is counted and the connection closed), hands
each message to `on_message`, and delivers to a device by writing a PUBLISH on its connection
(`deliver`). SUBSCRIBE is answered (its own subscribe topic granted, anything else refused) but
changes nothing. A device silent for 1.5 keep-alive periods is dropped, as 3.1.1 section 3.1.2.10
asks; a second CONNECT with the same client id takes the first one's place (section 3.1.4).

Why not amqtt (PyPI): a general broker would need a plugin to push to clients that never
subscribe, and holds per-client session state vixio does not use; this one holds a reader task
and a writer per device (memory per idle device: bench/bench_mqtt.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from vixio.config.mqtt import MqttConfig
from vixio.core.log_throttle import LogThrottle
from vixio.metrics.instruments import MQTT_CLIENTS, MQTT_REFUSED
from vixio.transports.xiaozhi.mqtt import packets as mp
from vixio.transports.xiaozhi.mqtt.credentials import MqttCredentials, Topics
from vixio.transports.xiaozhi.session.auth import DeviceIdentity

CONNECT_TIMEOUT = 10.0
"""Seconds a new connection has to send CONNECT."""
IDLE_KEEPALIVE_FACTOR = 1.5
SWEEP_S = 5.0
"""How often silent connections are looked for (a third of the shortest keep-alive, if sooner):
a drop comes up to this late."""


@dataclass(eq=False, slots=True)
class DeviceLink:
    """One device's MQTT connection (on an external broker: what vixio knows of it, `writer` None)."""

    identity: DeviceIdentity
    topics: Topics
    writer: asyncio.StreamWriter | None
    peer_host: str | None
    """The device's address; None behind an external broker (which does not tell)."""
    keepalive: int = 0
    """Seconds, from its CONNECT (0: none asked; `mqtt.keepalive` applies)."""
    local_host: str = "127.0.0.1"
    """The address the device reached the broker at: where it reaches the UDP socket too."""
    seen: float = 0.0
    """Loop time of its last packet (the sweeper drops it `silent_after` seconds later)."""
    silent_after: float = 0.0

    def send(self, data: bytes) -> bool:
        if self.writer is None or self.writer.is_closing():
            return False
        self.writer.write(data)
        return True


OnMessage = Callable[[DeviceLink, bytes], None]
"""A device's PUBLISH payload (on its own topic); must not block."""
OnGone = Callable[[DeviceLink], None]


class EmbeddedBroker:
    """Serves devices' MQTT connections on `config.host:port`."""

    def __init__(
        self, config: MqttConfig, credentials: MqttCredentials, on_message: OnMessage, on_gone: OnGone | None = None
    ) -> None:
        self.config = config
        self.credentials = credentials
        self.on_message = on_message
        self.on_gone = on_gone
        self.links: dict[str, DeviceLink] = {}
        """Connected devices by device id."""
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._open = 0
        self._refusals = LogThrottle(first=3, every=30.0)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.config.host, self.config.port)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="vixio-mqtt-keepalive")

    async def _sweep(self) -> None:
        """Close the connections silent past their keep-alive (1.5 periods), every `SWEEP_S`."""
        loop = asyncio.get_running_loop()
        while True:
            links = list(self.links.values())
            await asyncio.sleep(min([SWEEP_S, *(link.silent_after / 3 for link in links if link.silent_after)]))
            now = loop.time()
            for link in list(self.links.values()):
                if link.writer is not None and now - link.seen > link.silent_after and not link.writer.is_closing():
                    self._refuse("keepalive", link.peer_host or "?", "silent past its keep-alive")
                    link.writer.close()  # its read loop ends at once (end of stream)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the broker is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        if self._server is not None:
            self._server.close()
            for link in list(self.links.values()):
                if link.writer is not None:
                    link.writer.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    def deliver(self, device_id: str, payload: bytes) -> bool:
        """Write `payload` to `device_id`'s subscribe topic on its connection; False when it is not connected."""
        link = self.links.get(device_id)
        return link is not None and link.send(mp.publish(link.topics.subscribe, payload))

    def _refuse(self, reason: str, peer: str, detail: str) -> None:
        MQTT_REFUSED.labels(reason).inc()
        verdict = self._refusals.hit()
        if verdict is not None:
            logger.bind(component="mqtt").info(
                "refused {} ({}): {}{}", peer, reason, detail, f" ({verdict} more since)" if verdict > 1 else ""
            )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        peer_host = str(peer[0]) if peer else "?"
        self._open += 1
        link: DeviceLink | None = None
        try:
            if self._open > self.config.max_connections:
                self._refuse("busy", peer_host, f"{self._open - 1} connections open (mqtt.max_connections)")
                writer.write(mp.connack(mp.UNAVAILABLE))
                return
            link = await self._connect(reader, writer, peer_host)
            if link is not None:
                await self._read_loop(reader, link)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except mp.MalformedPacket as exc:
            self._refuse("malformed", peer_host, str(exc))
        except TimeoutError:
            self._refuse("keepalive", peer_host, "silent past its keep-alive" if link else "no CONNECT in time")
        finally:
            self._open -= 1
            if link is not None and self.links.get(link.identity.device_id) is link:
                del self.links[link.identity.device_id]
                MQTT_CLIENTS.dec()
                if self.on_gone is not None:
                    self.on_gone(link)
            writer.close()

    async def _connect(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> DeviceLink | None:
        packet = await asyncio.wait_for(mp.read_packet(reader, self.config.max_packet_bytes), CONNECT_TIMEOUT)
        if packet.kind != mp.CONNECT:
            raise mp.MalformedPacket("first packet is not CONNECT")
        connect = mp.parse_connect(packet.body)
        identity = self.credentials.check(connect.client_id, connect.username, connect.password)
        if identity is None:
            self._refuse("credentials", peer, f"client id {connect.client_id[:60]!r}")
            writer.write(mp.connack(mp.BAD_CREDENTIALS))
            return None
        sockname = writer.get_extra_info("sockname")
        link = DeviceLink(
            identity,
            self.credentials.topics(identity.device_id),
            writer,
            peer,
            connect.keepalive,
            str(sockname[0]) if sockname else "127.0.0.1",
        )
        previous = self.links.get(identity.device_id)
        if previous is not None:  # the same client again (a reboot, a NAT timeout): it replaces the old link
            if previous.writer is not None:
                previous.writer.close()
        else:
            MQTT_CLIENTS.inc()
        self.links[identity.device_id] = link
        writer.write(mp.connack(mp.ACCEPTED))
        return link

    async def _read_loop(self, reader: asyncio.StreamReader, link: DeviceLink) -> None:
        keepalive = link.keepalive or self.config.keepalive
        link.silent_after = min(keepalive, 2 * self.config.keepalive) * IDLE_KEEPALIVE_FACTOR
        clock = asyncio.get_running_loop().time
        while True:
            # No timer per packet: idle devices ping all day, and one sweep for all of them
            # (`_sweep`) costs less than a timer armed and cancelled at every PINGREQ.
            link.seen = clock()
            packet = await mp.read_packet(reader, self.config.max_packet_bytes)
            kind = packet.kind
            if kind == mp.PUBLISH:
                message = mp.parse_publish(packet.flags, packet.body)
                if message.qos == 1:
                    link.send(mp.packet_id_reply(mp.PUBACK, message.packet_id))
                elif message.qos == 2:
                    link.send(mp.packet_id_reply(mp.PUBREC, message.packet_id))
                if message.topic != link.topics.publish:
                    self._refuse(
                        "topic",
                        link.peer_host or "?",
                        f"{link.identity.device_id} published to {message.topic[:80]!r}, not its own topic",
                    )
                    return
                self.on_message(link, message.payload)
            elif kind == mp.PINGREQ:
                link.send(mp.PINGRESP_BYTES)
            elif kind == mp.PUBREL and len(packet.body) == 2:
                link.send(mp.packet_id_reply(mp.PUBCOMP, int.from_bytes(packet.body, "big")))
            elif kind == mp.SUBSCRIBE:
                packet_id, filters = mp.parse_subscribe(packet.body)
                link.send(mp.suback(packet_id, [0 if f == link.topics.subscribe else 0x80 for f in filters]))
            elif kind == mp.UNSUBSCRIBE and len(packet.body) >= 2:
                link.send(mp.packet_id_reply(mp.UNSUBACK, int.from_bytes(packet.body[:2], "big")))
            elif kind == mp.DISCONNECT:
                return
            elif kind == mp.PUBACK:
                continue  # the broker only sends QoS 0; a stray acknowledgement is harmless
            else:
                raise mp.MalformedPacket(f"unexpected packet type {kind}")
