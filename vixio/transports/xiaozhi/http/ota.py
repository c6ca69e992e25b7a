"""The OTA endpoint: how a Xiaozhi device finds the WebSocket server (and optionally gets bound).

At every boot the firmware POSTs its system info to its configured OTA URL and reads `websocket`,
`server_time`, `firmware` and `activation` from the reply. The reply must be HTTP 200 with
`websocket`; an `mqtt` object makes the device use MQTT + UDP instead, which vixio hands out (with
per-device credentials, beside `websocket`) only when `mqtt.enabled` (`mqtt_section`). An error body
sent with 200 would send the device to MQTT too, so failures here are always 4xx with `{"error": ...}`.

Routes:
    POST /xiaozhi/ota/                   device bootstrap (also without the trailing slash)
    GET  /xiaozhi/ota/                   human-readable status with the WebSocket URL
    POST /xiaozhi/ota/activate           device polls: 202 until confirmed, then 200; with the
                                         owner's device keys, a valid activation v2 proof is 200
                                         at once and a bad one 403 (activation_proof.py)
    POST /xiaozhi/ota/activate/confirm   operator: {"code": "123456"}; an operator per AdminGuard
                                         (the `xiaozhi.http.admin_token`, or a direct local caller
                                         when none is set), or `Authorization: Bearer <auth.secret>`
                                         when auth is enabled
    GET  /healthz                        {"status": "ok"} and nothing else (public); 503
                                         {"status": "starting"} while `ready()` says no

Every other route (the console, `/api/`, `/metrics`, activation confirm) is an operator route,
and every route is guarded against hostile callers by the port itself (http_port.py). The
answers here add their own limits: a request's Host is put into the WebSocket URL only when it
names this server; a token is handed out only to the Client-Id the Device-Id is pinned to (the
first one seen: identity.py), and only to a device auth would let in anyway (activated or
allow-listed) when activation or the allow-list is in use.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aiohttp import web
from loguru import logger
from yarl import URL

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.device_ids import DeviceIdError, loggable, normalize_device_id
from vixio.core.json_limits import DEFAULT_MAX_DEPTH, JsonTooDeep, check_depth
from vixio.state.store import Store, StoreError, StoreWriteError
from vixio.transports.xiaozhi.http.activation import ActivationRegistry, AdmissionStore
from vixio.transports.xiaozhi.http.activation_proof import ActivationRefused, DeviceProof
from vixio.transports.xiaozhi.http.hosts import advertised_host
from vixio.transports.xiaozhi.http.limits import address_key
from vixio.transports.xiaozhi.http.port import OTA_PATH, BadRequest, HttpPort, display_host, json_error, request_device
from vixio.transports.xiaozhi.session.auth import DeviceAuthenticator, parse_bearer
from vixio.transports.xiaozhi.session.identity import MAX_CLIENT_ID_CHARS, IdentityPins

ACTIVATION_TIMEOUT_MS = 30_000
"""Sent as `activation.timeout_ms`; the firmware's own default."""


async def _read_json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; an empty body counts as `{}` so `curl -X POST` works."""
    raw = await request.read()  # already read (with a deadline) by the middleware
    if not raw.strip():
        return {}
    try:
        check_depth(raw, DEFAULT_MAX_DEPTH)
        data = json.loads(raw)
    except JsonTooDeep as exc:
        raise BadRequest(f"body refused: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"body must be a JSON object, got {type(data).__name__}")
    return data


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


class LineBudget:
    """At most `lines` full log lines in each `window` seconds; past that, occurrences are counted,
    and the count is reported with the first occurrence of a later window."""

    def __init__(self, lines: int, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.lines = lines
        self.window = window
        self._clock = clock
        self._start = -window
        self._used = 0
        self._suppressed = 0

    def hit(self) -> tuple[bool, int]:
        """(log this one in full, occurrences suppressed in the window before, to report now)."""
        now = self._clock()
        report = 0
        if now - self._start >= self.window:
            report, self._suppressed = self._suppressed, 0
            self._start, self._used = now, 0
        self._used += 1
        if self._used > self.lines:
            self._suppressed += 1
            return False, report
        return True, report


def _client_address(request: web.Request) -> str:
    """Whom new activation codes are counted against (an IPv6 client by its /64)."""
    return address_key(request.transport.get_extra_info("peername") if request.transport else None)


class OtaServer(HttpPort):
    """aiohttp server for OTA, activation and health on `config.http.host:port` (the port
    itself, its guard and its other routes: http_port.py)."""

    def __init__(
        self,
        config: XiaozhiConfig,
        authenticator: DeviceAuthenticator,
        *,
        websocket_port: Callable[[], int] | int | None = None,
        store: AdmissionStore | None = None,
    ) -> None:
        """`websocket_port` is the WebSocket server's port, or a callable read per request (for a
        server bound to port 0 after this one); None uses `config.port`. `store` keeps confirmed
        activations (the state store, opened before `start()`); needed when activation is on."""
        self._authenticator = authenticator
        self._websocket_port = websocket_port
        self._activations: ActivationRegistry | None = None
        self.identities = IdentityPins(store) if isinstance(store, Store) else None
        """Who each Device-Id is (identity.py): OTA pins on first contact and gives a claimant no token."""
        if config.activation.enabled:
            if store is None:
                raise ValueError("activation.enabled needs the state store (state.path) to keep confirmed devices")
            self._activations = ActivationRegistry(config.activation, store)
        elif config.activation.device_keys or config.activation.device_keys_file:
            logger.warning("xiaozhi.activation.device_keys are set but activation.enabled is false: they are not used")
        self._offers = LineBudget(20)
        """The "device shows code" lines: a flood of new ids writes a bounded number of them."""
        self._refusals = LineBudget(5)
        super().__init__(config)
        for path in (OTA_PATH, OTA_PATH.rstrip("/")):
            self._app.router.add_post(path, self._handle_ota)
            self._app.router.add_get(path, self._handle_status)
        for path in (OTA_PATH + "activate", OTA_PATH + "activate/"):
            self._app.router.add_post(path, self._handle_activate)
        self._app.router.add_post(OTA_PATH + "activate/confirm", self._handle_confirm)
        self._app.router.add_get("/healthz", self._handle_health)
        self.mqtt_section: Callable[[str, str, str], dict[str, Any]] | None = None
        """(device id, Client-Id, host the device reached OTA at) -> the reply's `mqtt` object, for an
        admitted device; set by the app when `mqtt.enabled` (vixio/transports/xiaozhi/mqtt/)."""
        self.ready: Callable[[], bool] = lambda: True
        """Whether devices can be served now (with workers: one is ready and its loop turning); `/healthz` says so to
        load balancers and Kubernetes probes."""

    @property
    def activations(self) -> ActivationRegistry | None:
        """Pending and confirmed activations; None when `activation.enabled` is false."""
        return self._activations

    async def start(self) -> None:
        """Import a legacy activation file, then bind and serve; returns once listening."""
        if self._activations is not None and self._runner is None:
            await self._activations.import_legacy_file()
        await super().start()

    def websocket_url(self, request: web.Request | None = None) -> str:
        """URL handed to devices: `public_url`, else ws://<host the device dialled>:<ws port><path>."""
        if self._config.public_url:
            return self._config.public_url
        source = self._websocket_port
        port = self._config.port if source is None else source() if callable(source) else source
        return str(URL.build(scheme="ws", host=self._request_host(request), port=port, path=self._config.path))

    def _request_host(self, request: web.Request | None) -> str:
        # The device reached OTA through the address the request arrived on, so on a LAN it can
        # reach the WebSocket server through it too; its Host header is used only when it names
        # this server (hosts.py). Behind a proxy or NAT the operator sets `public_url`.
        fallback = display_host(self._config.http.host)
        if request is None:
            return fallback
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        local = str(sockname[0]) if sockname else None
        return advertised_host(request.headers.get("Host", ""), local, fallback, self.names.names)

    def _device_id(self, request: web.Request, body: dict[str, Any]) -> str:
        """`Device-Id`, else the body's `mac_address` (the firmware fills both from the same MAC)."""
        device_id = (request.headers.get("Device-Id", "").strip() or _text(body.get("mac_address"))).lower()
        if not device_id:
            raise BadRequest("missing Device-Id header (the device's lowercase MAC, aa:bb:cc:dd:ee:ff)")
        try:
            device_id = normalize_device_id(device_id, "Device-Id (or the body's mac_address)")
        except DeviceIdError as exc:
            request_device.set(loggable(device_id))
            raise BadRequest(str(exc)) from None
        request_device.set(device_id)
        return device_id

    async def _handle_ota(self, request: web.Request) -> web.Response:
        body = await _read_json_object(request)
        device_id = self._device_id(request, body)
        # The body's `uuid` is the same board UUID the firmware sends as Client-Id.
        client_id = request.headers.get("Client-Id", "").strip() or _text(body.get("uuid"))
        if not client_id:
            raise BadRequest("missing Client-Id header (the device's UUID)")
        application = body.get("application")
        version = _text(application.get("version")) if isinstance(application, dict) else ""
        offset = self._config.http.timezone_offset
        if offset is None:
            local = datetime.now().astimezone().utcoffset()
            offset = int(local.total_seconds() // 60) if local is not None else 0
        reply: dict[str, Any] = {
            "server_time": {"timestamp": int(time.time() * 1000), "timezone_offset": offset},
            # The device's own version with no URL means "no update".
            "firmware": {"version": version or "0.0.0", "url": ""},
            "websocket": {"url": self.websocket_url(request), "token": await self._token_for(client_id, device_id)},
        }
        if self.mqtt_section is not None and await self._admitted(client_id, device_id):
            # The firmware picks MQTT when both are present; it keeps `websocket` for when MQTT is turned off.
            reply["mqtt"] = self.mqtt_section(device_id, client_id, self._request_host(request))
        activation = await self._activation_offer(request, device_id)
        if activation is not None:
            reply["activation"] = activation
        return web.json_response(reply)

    async def _token_for(self, client_id: str, device_id: str) -> str:
        """A token only for a device the operator let in: confirmed (activation on) or allow-listed.
        With neither activation nor an allow-list there is no such gate, and every caller gets one
        (the server warns about that at startup). Never for a Client-Id other than the one the
        device is pinned to (pinned here on first contact). "" tells the device to send no token."""
        if not await self._admitted(client_id, device_id):
            return ""
        return self._authenticator.token_for(client_id, device_id)

    async def _admitted(self, client_id: str, device_id: str) -> bool:
        """Whether this pair gets credentials (a token, MQTT's): pinned, and let in when auth is on."""
        if self.identities is not None and not await self.identities.is_pinned(device_id, client_id, via="OTA"):
            return False  # a claimant; a re-flashed board waits for an operator's re-bind
        auth = self._config.auth
        if auth.enabled and not self._authenticator.is_allowed(device_id):
            if self._activations is not None and not await self._activations.is_confirmed(device_id):
                return False  # the firmware asks OTA again after activation and gets its credentials then
            if self._activations is None and auth.allowed_devices:
                return False
        return True

    async def _activation_offer(self, request: web.Request, device_id: str) -> dict[str, Any] | None:
        if self._activations is None or await self._activations.is_confirmed(device_id):
            return None
        try:
            pending = self._activations.pending(device_id, _client_address(request))
        except ActivationRefused as exc:
            raise BadRequest(self._refused(device_id, exc), exc.status) from None
        command = f'curl -X POST {self.url}activate/confirm -d \'{{"code": "{pending.code}"}}\''
        shown, unshown = self._offers.hit()
        if unshown:
            logger.info(
                "{} more activation codes were offered in {:g} s, not logged one by one (each device shows its own)",
                unshown,
                self._offers.window,
            )
        if shown:
            logger.bind(device=device_id).info(
                "device {} shows code {}; confirm with: {}", device_id, pending.code, command
            )
        return {
            "code": pending.code,
            "message": self._config.activation.message.replace("{code}", pending.code),
            "challenge": pending.challenge,
            "timeout_ms": ACTIVATION_TIMEOUT_MS,
        }

    async def _handle_activate(self, request: web.Request) -> web.Response:
        # With the owner's device keys (activation v2), a device proves it is one of theirs by
        # signing this server's challenge with its eFuse key; without them, or for firmware that
        # offers no proof, binding rests on the operator confirming the displayed code.
        body = await _read_json_object(request)
        device_id = self._device_id(request, body)
        registry = self._activations
        if registry is None or await registry.is_confirmed(device_id):
            return web.json_response({"status": "activated"})
        try:
            proof = DeviceProof.parse(body) if len(registry.keys) else None
            if proof is not None:
                await registry.prove(device_id, proof)
                logger.bind(device=device_id).info(
                    "device {} activated by the eFuse key of serial number {}", device_id, proof.serial_number
                )
                await self._pin_proven(request, device_id)
                return web.json_response({"status": "activated"})
            # The code is shown on the device only: a poll names no code, so a caller cannot learn it here.
            registry.pending(device_id, _client_address(request))
        except ActivationRefused as exc:
            return json_error(exc.status, self._refused(device_id, exc))
        return web.json_response(
            {"status": "pending", "message": "waiting for an operator to confirm the code the device shows"},
            status=202,
        )

    async def _pin_proven(self, request: web.Request, device_id: str) -> None:
        """A board that signed our challenge with its eFuse key is the device, whatever Client-Id the
        MAC was pinned to first (a claimant that reached the server before it): its Client-Id is
        pinned. Proof is stronger than first contact; a code confirmed by an operator pins nothing
        more than first contact did."""
        client_id = request.headers.get("Client-Id", "").strip()
        if self.identities is None or not client_id:
            return
        if await self.identities.pinned_client(device_id) == client_id[:MAX_CLIENT_ID_CHARS]:
            return
        try:
            await self.identities.store.repin_identity(device_id, client_id[:MAX_CLIENT_ID_CHARS])
        except StoreError as exc:  # logged by the store; the device is admitted, its pin stays as it was
            logger.bind(device=device_id).warning(
                "device {} proved its key, but its pin could not be moved: {}", device_id, exc
            )
            return
        logger.bind(device=device_id).warning(
            "device {} proved its eFuse key with Client-Id {!r}: pinned to it (it was pinned to another)",
            device_id,
            client_id[:40],
        )

    def _refused(self, device_id: str, refusal: ActivationRefused) -> str:
        """One WARNING line for a refused activation request (a count in a flood of them); the message."""
        logged, unlogged = self._refusals.hit()
        if unlogged:
            logger.warning(
                "{} more activation requests were refused in {:g} s, not logged one by one",
                unlogged,
                self._refusals.window,
            )
        if logged:
            logger.bind(device=device_id).warning("activation refused for {}: {}", device_id, refusal.message)
        return refusal.message

    def _auth_secret_bearer(self, request: web.Request) -> bool:
        # Kept from before the operator token: the auth secret also confirms activations.
        presented = parse_bearer(request.headers.get("Authorization"))
        secret = self._config.auth.secret
        return (
            self._config.auth.enabled and bool(presented) and hmac.compare_digest(presented.encode(), secret.encode())
        )

    async def _handle_confirm(self, request: web.Request) -> web.Response:
        refusal = None if self._auth_secret_bearer(request) else self.admin.check(request)
        if refusal is not None:
            return refusal
        if self._activations is None:
            return json_error(409, "activation.enabled is false; there is nothing to confirm")
        body = await _read_json_object(request)
        code = str(body.get("code", "")).strip()
        try:
            device_id = await self._activations.confirm(code)
        except StoreWriteError as exc:  # logged by the store; the code stays pending
            return json_error(503, f"the confirmation could not be stored ({exc}); try again")
        if device_id is None:
            return json_error(404, f"no device is waiting with code {code!r}")
        request_device.set(device_id)
        logger.bind(device=device_id).info("activation confirmed; the device finishes on its next /activate poll")
        return web.json_response({"status": "confirmed", "device_id": device_id})

    async def _handle_status(self, request: web.Request) -> web.Response:
        text = (
            "vixio OTA is running.\n"
            f"WebSocket URL: {self.websocket_url(request)}\n"
            "Devices POST their system info here (Device-Id and Client-Id headers) to get it.\n"
        )
        return web.Response(text=text)

    async def _handle_health(self, request: web.Request) -> web.Response:
        # Public and minimal: settings (auth, activation) are nobody's business but the operator's.
        if not self.ready():
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ok"})
