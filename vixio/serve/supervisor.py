"""`vixio serve --workers N`: one supervisor process and N worker processes on every core.

    supervisor (this module)                       workers (vixio/serve/worker.py), one per core
    ├── accepts on the WebSocket port and hands    ├── load the models once each
    │   each device to the worker with the fewest  ├── adopt the devices handed to them
    │   (vixio/serve/dispatch.py)                 │
    ├── HTTP port: OTA, activation, /healthz,      │
    │   /metrics, /metrics.json from every worker  │
    │   (/healthz: 503 while no worker's event     │
    │   loop turns: dispatch.py)                   │
    ├── starts, watches and restarts workers       ├── serve their sessions
    └── stops them all on SIGTERM / Ctrl-C         └── answer session routes on RUN_DIR/w<i>.sock

Why the HTTP port stays in the supervisor: OTA is stateless, activation codes live in one
registry, and tokens are issued in one place, so every device gets the same answers whichever
worker it lands on. Routes about live sessions (`/metrics`: vixio/serve/metrics_routes.py, the operator console's `/api/`) are
answered from every worker through `Peers` (vixio/fleet/peers.py explains how a new route uses
it). The WebSocket port is the supervisor's: it accepts there and passes each connection,
unread, to the ready worker holding the fewest (SO_REUSEPORT's hashing left workers ±7 devices
apart per 200, and the busier one slower: dispatch.py), which does the handshake and
everything after. While a worker restarts the others take the new devices.

A worker that exits unexpectedly is logged and restarted after a back-off (1 s, doubling up to
30 s; reset once it has run a minute: vixio/serve/lifecycle.py). SIGINT stops the HTTP port, sends SIGTERM to every worker
(each closes its sessions and exits), waits up to `server.shutdown_timeout`, kills what is left,
and exits 0. SIGTERM (`docker stop`, Kubernetes) is the graceful stop: the same, but the workers
get SIGUSR1 and first let the replies being made or spoken finish (`server.drain_timeout`). Workers read their config from a pipe that the supervisor holds open,
so even a supervisor killed outright takes its workers with it.

Several workers run on Linux only (`reuse_port_supported`); elsewhere `server.workers` must be 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
import time
from contextlib import suppress

from aiohttp import web
from loguru import logger

from vixio import metrics
from vixio.app import shutdown
from vixio.app.mqtt import PATH as MQTT_PUSH_PATH
from vixio.app.mqtt import MqttService
from vixio.app.notify import PATH as NOTIFY_PATH
from vixio.app.notify import NotifyAudio
from vixio.app.reminders import PATH as REMINDERS_PATH
from vixio.app.startup import log_http_urls, warn_about_open_tokens
from vixio.app.vision import UPLOAD_TIMEOUT
from vixio.config.models import VixioConfig
from vixio.console import ConsoleApi, FanOutBackend
from vixio.console.identity import IdentityApi
from vixio.console.memory import MemoryApi
from vixio.console.pairing import FanOutPairing, PairingApi, WorkerPairing
from vixio.console.profiles import ProfileApi
from vixio.console.reminders import ReminderApi
from vixio.console.worker_calls import WorkerBackend
from vixio.fleet.activation import SUPERVISOR, FleetActivation
from vixio.fleet.bus import BusNameTaken, fleet_bus
from vixio.fleet.directory import in_fleet, resolve_instance
from vixio.fleet.peers import PeerReply, Peers
from vixio.fleet.plan import cpu_count, listen_port, resolve_workers, reuse_port_supported
from vixio.profiles import ProfileBook
from vixio.serve.dispatch import Dispatcher
from vixio.serve.lifecycle import WorkerLifecycle, WorkerProcess, WorkerStartError
from vixio.serve.metrics_routes import InstanceMetrics, merge_metrics
from vixio.state import StoreError, open_store
from vixio.state.prune import prune_history_forever
from vixio.state.redis_link import unprotected
from vixio.transports.xiaozhi.companions.policy import warn_about_trusted_macs
from vixio.transports.xiaozhi.companions.stored import StorePairings
from vixio.transports.xiaozhi.http.hosts import VISION_PATH
from vixio.transports.xiaozhi.http.limits import install_accept_error_throttle
from vixio.transports.xiaozhi.http.ota import OtaServer
from vixio.transports.xiaozhi.session.auth import DeviceAuthenticator
from vixio.voice.agent_model import warn_when_model_has_no_tools

__all__ = [
    "Supervisor",
    "WorkerProcess",
    "WorkerStartError",
    "cpu_count",
    "listen_port",
    "merge_metrics",
    "resolve_workers",
    "reuse_port_supported",
    "serve_workers",
]


class Supervisor(WorkerLifecycle):
    """Starts, watches and stops the workers (lifecycle.py); serves the HTTP port."""

    def __init__(self, config: VixioConfig, workers: int) -> None:
        self.config = config
        self.workers = [WorkerProcess(i, "") for i in range(workers)]
        self.instance = resolve_instance(config.server.instance, in_fleet(config))
        """This server's name in a fleet ("" on one machine); its workers are "<instance>/w0", ..."""
        self.bus = fleet_bus(config, f"{self.instance}/{SUPERVISOR}", member=False)
        """A fleet: the other instances' workers, for the console; the other supervisors, for activation."""
        self.peers = Peers(remote=self.bus)
        self.store = open_store(config.state, config.memory)
        """The state store; every worker opens the same one (vixio/state/)."""
        self._pruner: asyncio.Task[None] | None = None
        self.ota = OtaServer(
            config.xiaozhi,
            DeviceAuthenticator(config.xiaozhi.auth),
            websocket_port=lambda: self.websocket_port,
            store=self.store,
        )
        if self.bus is not None and self.ota.activations is not None:  # a code confirmed on any instance
            self.bus.serve = FleetActivation(self.ota.activations, self.bus, self.instance).serve
        # Operator routes (vixio/transports/xiaozhi/http/admin.py): the JSON view has live device ids.
        self.ota.ready = self._serving  # /healthz: 503 until then
        self.metrics = InstanceMetrics(self.workers, self.peers)
        guard = self.ota.admin  # one guard for the port's routes: one wrong-token throttle
        self.ota.add_route("GET", metrics.PATH, guard.protect(self.metrics.prometheus))
        self.ota.add_route("GET", metrics.JSON_PATH, guard.protect(self.metrics.json))
        self.ota.add_route("POST", VISION_PATH, self._forward_to_any)
        # MQTT: OTA hands out the credentials here; worker w0 runs the broker (vixio/app/mqtt.py).
        self.mqtt = MqttService(config, None, owner=False)
        self.mqtt.peers = self.peers
        if self.mqtt.enabled:
            self.ota.mqtt_section = self.mqtt.ota_section
            self.ota.add_route("POST", MQTT_PUSH_PATH, guard.protect(self.mqtt.handle_operator_push))
        # The operator console over every worker's sessions (vixio/console/worker_calls.py).
        agent = config.agent
        self.console = ConsoleApi(
            FanOutBackend(lambda: [WorkerBackend(self.peers, w) for w in self.peers.workers]),
            guard,
            vcp_fuzzy=bool(agent is not None and agent.vcp_fuzzy_markers),
        )
        self.console.register(self.ota.add_route)
        # Companions live in the workers; the approvals are written here (vixio/console/pairing.py).
        self.pairings = StorePairings(self.store, config.xiaozhi.pairing.state_file)
        self.pairing = PairingApi(
            self.pairings, FanOutPairing(lambda: [WorkerPairing(self.peers, w) for w in self.peers.workers])
        )
        self.pairing.register(self.ota.add_route, self.console._protect)
        # Profile assignments are written here; the workers switch their sessions (vixio/console/profiles.py).
        self.profiles = ProfileApi(self.store, ProfileBook(config), lambda: self.console.backend)
        self.profiles.register(self.ota.add_route, self.console._protect)
        # Memory and history are edited in the store here; the workers' live sessions follow (vixio/console/memory.py).
        self.memory = MemoryApi(self.store, config.memory, lambda: self.console.backend)
        self.memory.register(self.ota.add_route, self.console._protect)
        # Re-binds are pins in the store: approved here, seen by every worker at the device's next contact.
        self.identities = IdentityApi(self.store)
        self.identities.register(self.ota.add_route, self.console._protect)
        # Reminders and operator messages are written here; the workers' schedulers fire them (vixio/app/reminders.py).
        zone = config.agent.timezone or "" if config.agent is not None else ""
        self.reminders = ReminderApi(self.store, config.reminders, zone)
        self.reminders.wake = lambda: self.peers.gather("POST", REMINDERS_PATH, json={"call": "wake"}, local=True)
        self.reminders.register(self.ota.add_route, self.console._protect)
        self.console.say_to_device = self.reminders.say
        # Notify files are in the store: rendered by a worker, fetched from this port.
        self.ota.add_route(
            "GET", NOTIFY_PATH, NotifyAudio(self.store, config.reminders.notify, lambda: None, lambda: "").handle
        )
        self.websocket_port = 0
        self._dispatch: Dispatcher | None = None
        self._run_dir = ""
        self._config_line = b""
        """The config the workers get: `config` with the reserved WebSocket port."""
        self._stopping = asyncio.Event()
        self._watchers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Open the store, reserve the port, serve HTTP, start every worker and wait until all are ready."""
        xiaozhi = self.config.xiaozhi
        try:  # here first: its migrations and imports run once, before any worker opens it
            await self.store.open()
            await self.pairings.load(import_legacy=True)
            await self.store.forget_sessions([self.holder(w.index) for w in self.workers])  # an earlier run's
        except StoreError as exc:
            raise WorkerStartError(str(exc)) from exc
        self._pruner = asyncio.create_task(
            prune_history_forever(self.store, self.config.memory), name="vixio-prune-history"
        )
        if self.bus is not None:
            try:
                await self.bus.start()
            except BusNameTaken as exc:
                raise WorkerStartError(str(exc)) from exc
        try:
            listener = listen_port(xiaozhi.host, xiaozhi.port)
        except OSError as exc:
            raise WorkerStartError(
                f"cannot bind the WebSocket port {xiaozhi.host}:{xiaozhi.port} (xiaozhi.port): {exc.strerror or exc}"
            ) from exc
        self._dispatch = Dispatcher(listener)
        self.websocket_port = int(listener.getsockname()[1])
        settings = self.config.model_dump(mode="json", by_alias=True)  # as written: `async`, not `run_async`
        settings["xiaozhi"]["port"] = self.websocket_port  # `port: 0` resolved once for all workers
        self._config_line = json.dumps(settings).encode() + b"\n"
        # Mode 0700: only this user reaches the sockets. A Unix socket path has at most 107 bytes.
        short_tmp = None if len(tempfile.gettempdir()) < 64 else "/tmp"
        self._run_dir = tempfile.mkdtemp(prefix="vixio-workers-", dir=short_tmp)
        for worker in self.workers:
            worker.socket_path = os.path.join(self._run_dir, f"w{worker.index}.sock")
        install_accept_error_throttle()  # the HTTP port: one line per second when descriptors run out
        warn_about_open_tokens(self.config)
        if in_fleet(self.config) and (open_redis := unprotected(self.config.state.url, self.config.state.password)):
            logger.warning(open_redis)
        warn_about_trusted_macs(self.config.xiaozhi)
        warn_when_model_has_no_tools(self.config)
        try:
            await self.ota.start()
        except OSError as exc:
            http = self.config.xiaozhi.http
            raise WorkerStartError(
                f"cannot bind the HTTP port {http.host}:{http.port} (xiaozhi.http.port): {exc.strerror or exc}"
            ) from exc
        started = time.perf_counter()
        await asyncio.gather(*(self._spawn(worker) for worker in self.workers))
        logger.info(
            "starting {} workers (pids {}); each loads its models",
            len(self.workers),
            ", ".join(str(w.pid) for w in self.workers),
        )

        async def ready(worker: WorkerProcess) -> tuple[WorkerProcess, bool]:
            return worker, await self._wait_ready(worker)

        waits = [asyncio.ensure_future(ready(worker)) for worker in self.workers]
        try:
            for next_ready in asyncio.as_completed(waits):
                worker, ok = await next_ready
                if not ok:  # fail fast; stop() ends the others
                    code = worker.process.returncode if worker.process is not None else None
                    raise WorkerStartError(
                        f"worker w{worker.index} did not start (exit code {code}); its log lines above say why"
                    )
        finally:
            for wait in waits:
                wait.cancel()
        self._dispatch.start()
        self._watchers = [asyncio.create_task(self._watch(w), name=f"vixio-watch-w{w.index}") for w in self.workers]
        http = self.config.xiaozhi.http
        logger.info("{} workers ready in {:.1f} s", len(self.workers), time.perf_counter() - started)
        logger.info(
            "WebSocket server on {}:{} (any path), shared by {} workers",
            xiaozhi.host,
            self.websocket_port,
            len(self.workers),
        )
        log_http_urls(http.host, self.ota.port, self.config)

    async def stop(self, *, drain: bool = False) -> None:
        """Stop the HTTP port and every worker (bounded), then release the port and run dir;
        `drain`: the workers let their replies finish first (`server.drain_timeout`)."""
        self._stopping.set()
        for task in self._watchers:  # no restart from here on
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self.console.close()  # open console pages would hold the HTTP server's shutdown
        await shutdown.step("the HTTP port", self.ota.stop())
        if self._dispatch is not None:  # no new device from here on
            await shutdown.step("the WebSocket port", self._dispatch.stop())
            self._dispatch = None
        running = await self._end_workers(drain=drain)
        await shutdown.step("the connections to the workers", self.peers.close())
        if self.bus is not None:
            await shutdown.step("the fleet's bus", self.bus.close())
        if self._pruner is not None:
            self._pruner.cancel()
            with suppress(asyncio.CancelledError):
                await self._pruner
        await shutdown.step("the state store", self.store.close())
        if self._run_dir:
            shutil.rmtree(self._run_dir, ignore_errors=True)
        if running:
            logger.info("all workers stopped")

    def _serving(self) -> bool:
        """A worker is ready and its event loop turns (a stuck one still has its process: dispatch.py)."""
        dispatch = self._dispatch
        return dispatch is not None and any(w.ready and dispatch.turning(w.index) for w in self.workers)

    # --- HTTP routes answered from every worker -----------------------------------------------

    async def _forward_to_any(self, request: web.Request) -> web.Response:
        """A stateless route that needs a worker's models (the camera tool's upload)."""
        headers = {
            name: value
            for name, value in request.headers.items()
            if name.lower() in ("authorization", "content-type", "device-id", "client-id")
        }
        limit = self.config.vision.max_image_bytes + 64 * 1024 if self.config.vision is not None else 64 * 1024
        body = bytearray()
        try:
            async with asyncio.timeout(UPLOAD_TIMEOUT):  # streamed, bounded: larger than the HTTP app's body limit
                while chunk := await request.content.readany():
                    body += chunk
                    if len(body) > limit:
                        return web.json_response(
                            {"success": False, "message": f"the upload is larger than {limit} bytes"}, status=413
                        )
        except TimeoutError:
            return web.json_response(
                {"success": False, "message": f"the upload did not arrive within {UPLOAD_TIMEOUT:g} s"}, status=408
            )
        reply = await self.peers.forward_any(request.method, request.path_qs, body=bytes(body), headers=headers)
        return _response(reply)


def _response(reply: PeerReply) -> web.Response:
    if reply.content_type == "application/json" or not isinstance(reply.body, dict):
        return web.json_response(reply.body, status=reply.status)
    return web.Response(text=str(reply.body.get("error", "")), status=reply.status, content_type=reply.content_type)


async def serve_workers(config: VixioConfig, workers: int) -> int:
    """Run the supervisor until SIGINT/SIGTERM; the exit status (1 when the workers could not start)."""
    stop = asyncio.Event()
    signals: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        signals.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    supervisor = Supervisor(config, workers)
    starting = asyncio.create_task(supervisor.start(), name="vixio-supervisor-start")
    stopping = asyncio.create_task(stop.wait(), name="vixio-stop-signal")
    status = 0
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()
            await stop.wait()
        logger.info("shutting down")
    except WorkerStartError as exc:
        logger.error("cannot serve: {}", exc)
        status = 1
    finally:
        starting.cancel()
        stopping.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await starting
        await supervisor.stop(drain=signals[:1] == [signal.SIGTERM])
    return status
