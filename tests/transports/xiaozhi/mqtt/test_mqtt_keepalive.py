"""The embedded broker drops a device silent past 1.5 of its keep-alive periods (MQTT 3.1.1
section 3.1.2.10), found by its sweep rather than a timer per packet, and keeps one that pings.
Real sockets on loopback, raw MQTT packets."""

from __future__ import annotations

import asyncio

import pytest

from vixio.config.mqtt import MqttConfig
from vixio.metrics.instruments import MQTT_REFUSED
from vixio.transports.xiaozhi.mqtt import packets as mp
from vixio.transports.xiaozhi.mqtt.broker import EmbeddedBroker
from vixio.transports.xiaozhi.mqtt.credentials import MqttCredentials

pytestmark = pytest.mark.integration

SECRET = "keepalive-test-secret-0123456789"


async def connect(
    broker: EmbeddedBroker, device_id: str, keepalive: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    section = MqttCredentials(SECRET, "vixio").issue(device_id, "board", "", keepalive)
    body = (
        mp._pack_string("MQTT")
        + bytes([4, 0xC2])
        + keepalive.to_bytes(2, "big")
        + mp._pack_string(str(section["client_id"]))
        + mp._pack_string(str(section["username"]))
        + mp._pack_string(str(section["password"]))
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(mp.encode(mp.CONNECT, 0, body))
    assert await reader.readexactly(4) == mp.connack(mp.ACCEPTED)
    return reader, writer


async def test_a_silent_device_is_dropped_and_one_that_pings_is_kept() -> None:
    config = MqttConfig(enabled=True, host="127.0.0.1", port=0, secret=SECRET)
    broker = EmbeddedBroker(config, MqttCredentials(SECRET, "vixio"), lambda link, payload: None)
    await broker.start()
    refused = MQTT_REFUSED.labels("keepalive")._value.get()
    try:
        silent_reader, silent = await connect(broker, "02:00:00:00:47:01", keepalive=1)
        pinging_reader, pinging = await connect(broker, "02:00:00:00:47:02", keepalive=1)
        for _ in range(8):  # 4 s: past 1.5 periods several times over
            pinging.write(mp.encode(mp.PINGREQ, 0, b""))
            assert await asyncio.wait_for(pinging_reader.readexactly(2), 2) == mp.PINGRESP_BYTES
            await asyncio.sleep(0.5)
        assert await asyncio.wait_for(silent_reader.read(), 1) == b""  # closed by the broker
        assert set(broker.links) == {"02:00:00:00:47:02"}
        assert MQTT_REFUSED.labels("keepalive")._value.get() == refused + 1
        silent.close()
        pinging.close()
    finally:
        await broker.stop()
