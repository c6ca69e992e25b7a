"""The UDP audio socket every MQTT session shares: each datagram to its session, or dropped and counted.

A datagram reaches a session only when, in this order: it has the firmware's header (size,
type 0x01, a length that matches; the Opus payload at most `mqtt.max_audio_bytes`), its ssrc
names a live session, it comes from that device's host (the MQTT connection's address; the
first sender's address once it is pinned), and its sequence is above the last one accepted.
Everything else is counted in `vixio_udp_audio_dropped{reason}` and logged at most once in a
while, never raising into the loop.
"""

from __future__ import annotations

import asyncio

from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.metrics.instruments import UDP_DROPPED
from vixio.transports.xiaozhi.mqtt.audio_packets import BadPacket, parse_header
from vixio.transports.xiaozhi.mqtt.channel import MqttUdpChannel


class AudioSocket(asyncio.DatagramProtocol):
    """Routes datagrams to sessions by ssrc (`sessions`, filled by front.py)."""

    def __init__(self, max_payload: int) -> None:
        self.max_payload = max_payload
        self.sessions: dict[int, MqttUdpChannel] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self._log = LogThrottle(first=3, every=30.0)
        self.dropped: dict[str, int] = {}
        """Drops by reason in this process (tests and /metrics.json read it)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(data, address)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            header = parse_header(data, self.max_payload)
            channel = self.sessions.get(header.ssrc)
            if channel is None:
                raise BadPacket("unknown")
            if channel.udp_address is None:
                if channel.peer_host is not None and addr[0] != channel.peer_host:
                    raise BadPacket("address")
                pinned = True
            else:
                if addr != channel.udp_address:
                    raise BadPacket("address")
                pinned = False
            payload = channel.cipher.open(data, header)
            if pinned:
                channel.udp_address = (addr[0], addr[1])
        except BadPacket as exc:
            self._drop(exc.reason, addr)
            return
        channel.incoming_audio(payload)

    def _drop(self, reason: str, addr: tuple[str, int]) -> None:
        UDP_DROPPED.labels(reason).inc()
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        verdict = self._log.hit()
        if verdict is not None:
            logger.bind(component="mqtt").info(
                "dropped a UDP datagram from {}:{} ({}){}",
                addr[0],
                addr[1],
                reason,
                f"; {verdict} more since" if verdict > 1 else "",
            )

    def error_received(self, exc: Exception) -> None:
        logger.bind(component="mqtt").debug("UDP error: {}", exc)  # ICMP unreachable from a device that left


async def open_audio_socket(host: str, port: int, max_payload: int) -> AudioSocket:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_datagram_endpoint(lambda: AudioSocket(max_payload), local_addr=(host, port))
    return protocol
