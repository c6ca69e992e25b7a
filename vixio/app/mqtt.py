"""MQTT + UDP in the application: who owns the broker, what OTA hands out, and the push channel.

One process owns the embedded broker and the UDP audio socket: the only process without workers,
or worker w0 with `vixio serve --workers N` (a device's MQTT connection and its audio sessions
then all live there; the other workers serve WebSocket devices: the broker's TCP listener is one
socket, and a device's connection is its only way in). With an external broker every worker is
a client of it, with a UDP socket of its own (`udp_port + worker index`), and serves the devices
it claims at their hello, as instances sharing the broker do (transports/xiaozhi/mqtt/ownership.py):
the MQTT sessions spread over the workers. The supervisor answers OTA, so it builds the `mqtt`
section from the config and the shared secret alone, without a broker.

The push channel works from any process: `push_to_idle_device` delivers through the local
broker when this process owns it, else asks the other workers (and, in a fleet, the other
instances' workers over the bus) through the session route `PATH`, which only a process whose
broker holds the device answers with 200.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from vixio.config.extras import install_hint
from vixio.config.models import VixioConfig
from vixio.transports.xiaozhi.mqtt.credentials import MqttCredentials, load_secret

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.mqtt.front import MqttFront
    from vixio.transports.xiaozhi.websocket.transport import XiaozhiTransport

PATH = "/api/mqtt/push"
"""Session route: `{"device_id": ..., "message": {...}}` -> 200 `{"delivered": true}`, or 404 when
this process's broker does not hold the device."""
MAX_PUSH_BYTES = 64 * 1024


def front_class() -> type[MqttFront]:
    """The embedded broker's front, imported when `mqtt.enabled` (AES-CTR needs the `mqtt` extra)."""
    try:
        from vixio.transports.xiaozhi.mqtt.front import MqttFront
    except ImportError as exc:
        raise ImportError(f"mqtt.enabled needs the 'mqtt' extra ({exc.name} missing): {install_hint('mqtt')}") from exc
    return MqttFront


class Forwarder(Protocol):
    """vixio.fleet.peers.Peers, as far as a push needs it (the app layer does not import serve)."""

    async def forward_first(self, method: str, path: str, *, json: Any = None) -> Any: ...


class MqttService:
    """The MQTT side of one process (a no-op shell when `mqtt.enabled` is false)."""

    def __init__(
        self, config: VixioConfig, transport: XiaozhiTransport | None, *, owner: bool, port_offset: int = 0
    ) -> None:
        """`owner`: this process runs the broker, or is a client of the external one (then
        `transport` serves its sessions); `port_offset`: its UDP port's offset (its worker index)."""
        self.config = config.mqtt
        self.enabled = config.mqtt.enabled
        self.front: MqttFront | None = None
        self.peers: Forwarder | None = None
        """The other workers (set by vixio/serve/worker.py): where a push goes when the broker is elsewhere."""
        self.operator_check: Callable[[web.Request], web.StreamResponse | None] | None = None
        """In one process `PATH` is on the HTTP port: the admin guard's check (None: a worker's private socket)."""
        self._credentials: MqttCredentials | None = None
        if self.enabled:
            state_dir = Path(config.state.path).parent if config.state.backend == "sqlite" else Path(".vixio")
            self._credentials = MqttCredentials(load_secret(self.config.secret, state_dir), self.config.topic_prefix)
            if owner and transport is not None:
                self.front = front_class()(self.config, transport, self._credentials, port_offset)

    async def start(self) -> None:
        if self.front is not None:
            await self.front.start()

    def stop_accepting(self) -> None:
        """A graceful stop's drain: no new audio session (idle devices stay connected until `stop`)."""
        if self.front is not None:
            self.front.accepting = False

    async def stop(self) -> None:
        if self.front is not None:
            await self.front.stop()

    def ota_section(self, device_id: str, client_id: str, host: str) -> dict[str, Any]:
        """OTA's `mqtt` object (OtaServer.mqtt_section)."""
        assert self._credentials is not None
        if self.front is not None:
            return self.front.ota_section(device_id, client_id, host)
        return self._credentials.issue(
            device_id, client_id, self.config.device_endpoint(host, self.config.broker_port()), self.config.keepalive
        )

    async def push_to_idle_device(self, device_id: str, message: dict[str, Any]) -> bool:
        """Send `message` (a JSON object with a string `type`) to `device_id` over MQTT, from any
        worker or instance: True once written to the device's MQTT connection (idle or in a
        session), False when no broker of this fleet holds it (WebSocket-only, offline, MQTT off).

        The reminders' delivery (`{"type": "notify", "audio_url": ..., "subtitles": [{"start_ms":
        0, "text": ...}]}`, firmware 2.5; an older firmware logs and ignores an unknown type) and
        `vixio say` / `/api/say` to an idle device call this."""
        if not self.enabled:
            return False
        if self.front is not None:
            return await self.front.push_to_idle_device(device_id, message)
        if self.peers is None:
            return False
        reply = await self.peers.forward_first("POST", PATH, json={"device_id": device_id, "message": message})
        return reply.ok and bool(isinstance(reply.body, dict) and reply.body.get("delivered"))

    async def handle_push(self, request: web.Request) -> web.StreamResponse:
        """The session route `PATH`: delivered by this process's broker, or 404 (a worker never
        forwards it on: the asking process asks every worker itself)."""
        return await self._push_route(request, local=True)

    async def handle_operator_push(self, request: web.Request) -> web.StreamResponse:
        """`PATH` on the supervisor's HTTP port (operator-guarded there): whichever worker holds the device."""
        return await self._push_route(request, local=False)

    async def _push_route(self, request: web.Request, *, local: bool) -> web.StreamResponse:
        if self.operator_check is not None and (refusal := self.operator_check(request)) is not None:
            return refusal
        if request.content_length is not None and request.content_length > MAX_PUSH_BYTES:
            return web.json_response({"error": "push body too large"}, status=413)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "body is not JSON"}, status=400)
        device_id, message = (body.get("device_id"), body.get("message")) if isinstance(body, dict) else (None, None)
        if not isinstance(device_id, str) or not isinstance(message, dict) or not isinstance(message.get("type"), str):
            return web.json_response(
                {"error": 'expected {"device_id": str, "message": {"type": str, ...}}'}, status=400
            )
        if local:
            delivered = self.front is not None and await self.front.push_to_idle_device(device_id, message)
        else:
            delivered = await self.push_to_idle_device(device_id, message)
        if not delivered:
            return web.json_response({"error": "the device is not connected to this broker"}, status=404)
        return web.json_response({"delivered": True})
