"""An external broker (`mqtt.broker_url`): vixio as one client of a mosquitto with its plugin.

The firmware never subscribes, so the broker must deliver per client: deploy/mosquitto/
vixio_devices.c does, and checks the credentials OTA issues and each device's topics (docs/mqtt.md,
"External broker"). vixio connects with the URL's user, subscribes to every device's publish
topic (`<prefix>/+/up`) and to the plugin's presence topic (`<prefix>/+/state`: the device's
MQTT client id while it is connected, empty once it left), and publishes to a device's
`<prefix>/<key>/down`, which the plugin hands to that device's connection.

The same interface as broker.py's EmbeddedBroker (`links`, `deliver`, `start`, `stop`, `port`),
so front.py serves either. The broker does not tell a device's address: UDP packets are bound to
the first sender of a session instead, and `mqtt.public_host` names where devices reach vixio's
UDP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from urllib.parse import unquote, urlsplit

from loguru import logger

from vixio.config.mqtt import MqttConfig
from vixio.transports.xiaozhi.mqtt.broker import DeviceLink, OnGone, OnMessage
from vixio.transports.xiaozhi.mqtt.credentials import MqttCredentials, device_key
from vixio.transports.xiaozhi.session.auth import DeviceIdentity

RECONNECT_SECONDS = 5.0


class ExternalBroker:
    """vixio's client connection to `mqtt.broker_url`."""

    def __init__(
        self, config: MqttConfig, credentials: MqttCredentials, on_message: OnMessage, on_gone: OnGone | None = None
    ) -> None:
        assert config.broker_url is not None
        url = urlsplit(config.broker_url)
        self.host, self._port = url.hostname or "127.0.0.1", url.port or 1883
        self._username, self._password = unquote(url.username or ""), unquote(url.password or "")
        self.config = config
        self.credentials = credentials
        self.on_message = on_message
        self.on_gone = on_gone
        self.links: dict[str, DeviceLink] = {}
        """Devices the plugin says are connected, by device id."""
        self._client: object | None = None
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._publishing: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> None:
        try:
            import aiomqtt  # noqa: F401
        except ImportError as exc:
            raise ImportError("mqtt.broker_url needs aiomqtt, which the 'mqtt' extra installs") from exc
        self._runner = asyncio.create_task(self._run(), name="vixio-mqtt-external")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._connected.wait(), 10.0)
        if not self._connected.is_set():
            logger.bind(component="mqtt").warning(
                "the MQTT broker {}:{} does not answer yet; retrying every {:g} s",
                self.host,
                self._port,
                RECONNECT_SECONDS,
            )

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None

    def deliver(self, device_id: str, payload: bytes) -> bool:
        """Publish to the device's subscribe topic; False when the plugin says it is not connected."""
        link, client = self.links.get(device_id), self._client
        if link is None or client is None:
            return False
        task = asyncio.get_running_loop().create_task(client.publish(link.topics.subscribe, payload, qos=0))  # type: ignore[attr-defined]
        self._publishing.add(task)
        task.add_done_callback(self._published)
        return True

    def _published(self, task: asyncio.Task[None]) -> None:
        self._publishing.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the connection went: the device's session ends
            logger.bind(component="mqtt").debug("publish to the broker failed: {}", task.exception())

    async def _run(self) -> None:
        import aiomqtt

        prefix = self.config.topic_prefix
        while True:
            try:
                async with aiomqtt.Client(
                    self.host,
                    self._port,
                    username=self._username,
                    password=self._password,
                    identifier=f"vixio-{secrets.token_hex(6)}",
                    keepalive=60,
                ) as client:
                    await client.subscribe(f"{prefix}/+/state", qos=1)
                    await client.subscribe(f"{prefix}/+/up", qos=0)
                    self._client = client
                    self._connected.set()
                    logger.bind(component="mqtt").info("connected to the MQTT broker {}:{}", self.host, self._port)
                    async for message in client.messages:
                        self._dispatch(str(message.topic), bytes(message.payload))
            except aiomqtt.MqttError as exc:
                logger.bind(component="mqtt").warning(
                    "MQTT broker {}:{}: {}; reconnecting in {:g} s", self.host, self._port, exc, RECONNECT_SECONDS
                )
            finally:
                self._client = None
                for link in list(self.links.values()):
                    self._gone(link.identity.device_id)
            await asyncio.sleep(RECONNECT_SECONDS)

    def _dispatch(self, topic: str, payload: bytes) -> None:
        parts = topic.split("/")
        if len(parts) != 3 or parts[0] != self.config.topic_prefix:
            return
        if parts[2] == "state":
            self._presence(parts[1], payload)
            return
        device_id = self.credentials.device_of_topic(topic)
        link = self.links.get(device_id) if device_id is not None else None
        if link is not None and len(payload) <= self.config.max_packet_bytes:
            self.on_message(link, payload)

    def _presence(self, key: str, payload: bytes) -> None:
        client_id = payload.decode("utf-8", "replace")
        device_id, _, board = client_id.partition("|")
        if not client_id:
            for known in [d for d, link in self.links.items() if link.identity.device_id and device_key(d) == key]:
                self._gone(known)
            return
        if device_key(device_id) != key:  # the plugin names the key it authenticated: anything else is not its
            return
        self.links[device_id] = DeviceLink(
            DeviceIdentity(device_id=device_id, client_id=board),
            self.credentials.topics(device_id),
            None,
            None,
            local_host=self.config.public_host or self.host,
        )

    def _gone(self, device_id: str) -> None:
        link = self.links.pop(device_id, None)
        if link is not None and self.on_gone is not None:
            self.on_gone(link)
