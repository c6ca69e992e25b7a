"""The application layer: wires config, transport, OTA and the per-session pipeline together.

This package is the only place that knows both a transport and what goes into a pipeline (a device
session's assembly: vixio/app/session_pipeline.py); transports and providers never import each
other (docs/architecture.md).

HTTP routes come in two kinds. Front routes (OTA, activation, health) need no session and are
answered by whoever serves the HTTP port. Session routes (`session_routes`: `/metrics` and
`/metrics.json` (vixio/app/process_report.py), and any route that reports on or acts on live
sessions) need this process's sessions: in one process they are served on the HTTP port too; in a
worker process (`vixio serve --workers N`) they are served on the worker's private socket, and the supervisor answers the HTTP port from every worker
(vixio/serve/supervisor.py, vixio/fleet/peers.py). What the process does and says as it starts (heap
freeze, config warnings, the banner) is vixio/app/startup.py, shared with the supervisor.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from loguru import logger

from vixio import metrics
from vixio.app import shutdown
from vixio.app.live_profiles import LiveProfiles
from vixio.app.mqtt import PATH as MQTT_PUSH_PATH
from vixio.app.mqtt import MqttService
from vixio.app.process_report import ProcessReport
from vixio.app.reminders import attach_reminders
from vixio.app.session_pipeline import build_session_pipeline
from vixio.app.startup import freeze_startup_heap, log_http_urls, warn_about_open_tokens
from vixio.app.task_results import TaskResults
from vixio.app.vision import VisionRoute
from vixio.config.models import VixioConfig
from vixio.config.pipeline import LocalLlamaAgentConfig
from vixio.console import Console
from vixio.console import pairing as console_pairing
from vixio.console import worker_calls as console_workers
from vixio.core.pipeline import Pipeline
from vixio.core.tools.types import ToolDefinition
from vixio.fleet.directory import SessionDirectory, holder_name, in_fleet, resolve_instance
from vixio.fleet.plan import cpu_count
from vixio.memory.conversation import ConversationMemory
from vixio.memory.long_term import fact_model, long_term_updater
from vixio.profiles import ProfileBook
from vixio.profiles.book import DEFAULT
from vixio.state import open_store
from vixio.state.limits import StoreRate
from vixio.state.prune import prune_history_forever
from vixio.transports.xiaozhi.companions.policy import warn_about_trusted_macs
from vixio.transports.xiaozhi.companions.stored import StorePairings
from vixio.transports.xiaozhi.http.hosts import VISION_PATH
from vixio.transports.xiaozhi.http.limits import AcceptErrorThrottle, install_accept_error_throttle
from vixio.transports.xiaozhi.http.ota import OtaServer
from vixio.transports.xiaozhi.session.auth import DeviceAuthenticator
from vixio.transports.xiaozhi.session.identity import IdentityPins
from vixio.transports.xiaozhi.websocket.transport import DeviceContext, PipelineFactory, XiaozhiTransport
from vixio.voice.agent_model import warn_when_model_has_no_tools
from vixio.voice.session_tools import SessionTools
from vixio.voice.stack import VoiceStack

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class SessionRoute:
    """An HTTP route answered from this process's live sessions."""

    method: str
    path: str
    handler: Handler


class VixioServer:
    """The WebSocket server and the OTA/HTTP server of one process."""

    def __init__(
        self,
        config: VixioConfig,
        pipeline_factory: PipelineFactory | None = None,
        *,
        serve_http: bool = True,
        worker_index: int = 0,
    ) -> None:
        """`serve_http=False` (a worker process) starts no OTA/HTTP server: the supervisor answers
        the HTTP port and reaches `session_routes` through the worker's private socket."""
        self.config = config
        self.serve_http = serve_http
        self.worker_index = worker_index
        self.authenticator = DeviceAuthenticator(config.xiaozhi.auth)
        self.store = open_store(config.state, config.memory)
        """What outlives a session (vixio/state/): activations, history, memory; opened in `start()`."""
        self.pairings = StorePairings(self.store, config.xiaozhi.pairing.state_file)
        """Companion approvals (loaded in `start()`)."""
        self.transport = XiaozhiTransport(
            config.xiaozhi,
            pipeline_factory or self._build_pipeline,
            authenticator=self.authenticator,
            pairings=self.pairings,
        )
        # With a worker on every core there is no core to spare for encoding beside the loop.
        self.transport.encode_on_thread = cpu_count() > (config.server.workers or 1)
        self.book = ProfileBook(config)
        """The config's profiles, and which one a device gets (vixio/profiles/)."""
        self._memories: dict[str, ConversationMemory | None] = {}
        self.profiles = LiveProfiles(self.book, self.store)
        """Live sessions' profiles (vixio/app/live_profiles.py)."""
        self._pruner: asyncio.Task[None] | None = None
        self.ota = OtaServer(
            config.xiaozhi, self.authenticator, websocket_port=lambda: self.transport.port, store=self.store
        )
        self.mqtt = MqttService(
            config,
            self.transport,
            owner=worker_index == 0 or config.mqtt.broker_url is not None,
            port_offset=worker_index,
        )
        """MQTT + UDP (vixio/app/mqtt.py): the broker in the process that owns it, the push channel in every one."""
        if self.mqtt.enabled:
            self.ota.mqtt_section = self.mqtt.ota_section
        if serve_http:
            self.mqtt.operator_check = self.ota.admin.check
        self.voice = VoiceStack(config)
        self._custom_factory = pipeline_factory is not None
        self.vision = VisionRoute(config.vision, self.authenticator)
        self.report = ProcessReport(self)
        """What this process reports: /metrics, /metrics.json (vixio/app/process_report.py)."""
        self.session_routes: list[SessionRoute] = [
            SessionRoute("GET", metrics.PATH, self.report.prometheus),
            SessionRoute("GET", metrics.JSON_PATH, self.report.json),
            SessionRoute("POST", VISION_PATH, self.vision.handle),  # the camera tool's upload
            SessionRoute("POST", MQTT_PUSH_PATH, self.mqtt.handle_push),
        ]
        """Routes that need this process's sessions (or models); add more before `start()`."""
        self.transport.server_tools = self._server_tool  # registerTools main_type "local"
        self.tools: dict[str, SessionTools] = {}
        """Live sessions' tools by session id."""
        memory = config.memory
        self.task_results = TaskResults(self, memory.resume_minutes * 60 if memory.enabled else 0.0)
        """Background results that finish after their session go to the device's next one (task_results.py)."""
        self.voice.results_after_session = self.task_results.finished
        self.transport.on_device_session = self.task_results.device_session
        self.instance = resolve_instance(config.server.instance, in_fleet(config))
        self.directory = SessionDirectory(
            self.store,
            holder_name(self.instance, worker_index),
            ttl=config.server.directory_ttl,
            close_here=self.transport.close_session,
        )
        """Records this process's sessions and closes a device's stale one (vixio/fleet/directory.py)."""
        if self.mqtt.front is not None and config.mqtt.broker_url is not None:
            # Other instances may share the external broker: each serves the devices it claims at their hello.
            # The holder is unique per process start: two instances without names must not look alike.
            holder = f"{holder_name(self.instance, worker_index)}#{secrets.token_hex(3)}"
            self.mqtt.front.share_broker(self.store.claim, self.store.release, holder)
        self.transport.sessions_seen = self.directory
        # Who each device is, pinned in the store (vixio/transports/xiaozhi/session/identity.py); OTA pins through the same store.
        self.transport.identities = IdentityPins(self.store)
        self.transport.companions.pinned_client = self.transport.identities.pinned_client
        # registerTools per Device-Id over all its connections, counted machine- or fleet-wide.
        self.transport.registration_rate = StoreRate(
            self.store, "register", config.xiaozhi.mcp.limits.registrations_per_minute
        ).allow
        self._accept_throttle: AcceptErrorThrottle | None = None
        self.console = Console(self)
        """The operator console at /console/ and its /api/ (vixio.console)."""
        self.reminders = attach_reminders(self)
        """Reminders that fire, operator messages, `notify` (vixio/app/reminders.py); `reminders.idle_push`
        is where a transport that reaches idle devices (MQTT) plugs in."""
        if self.mqtt.enabled:  # idle devices on MQTT hear reminders and operator messages at once
            self.reminders.idle_push = self
        if not serve_http:  # a worker: the supervisor's console and /metrics reach this one over its private socket
            self.session_routes.append(SessionRoute("GET", metrics.SAMPLES_PATH, self.report.samples))
            self.session_routes.append(
                SessionRoute("POST", console_workers.PATH, console_workers.worker_route(self.console.local))
            )
            self.session_routes.append(
                SessionRoute(
                    "POST", console_pairing.WORKER_PATH, console_pairing.worker_route(self.console.pairing_local)
                )
            )

    def metrics(self) -> dict[str, Any]:
        """Live sessions and the latency marks of their recent turns (vixio/app/process_report.py)."""
        return self.report.snapshot()

    def _server_tool(self, name: str) -> ToolDefinition | None:
        """A tool this server provides to every session (local, process-scoped MCP), by name."""
        candidates = list(self.voice.local_tools)
        if self.voice.mcp is not None:
            candidates += [tool for tools in self.voice.mcp.process_tools().values() for tool in tools]
        return next((tool for tool in candidates if tool.name == name), None)

    def memory(self, profile: str = DEFAULT) -> ConversationMemory | None:
        """Resumes and records the conversations of a profile's devices (made on first use); None
        with its `memory.enabled: false`."""
        if profile not in self._memories:
            config = self.book.effective(profile)
            self._memories[profile] = (
                ConversationMemory(self.store, config.memory, long_term_updater(config), fact_model(config))
                if config.memory.enabled
                else None
            )
        return self._memories[profile]

    def memories(self) -> list[ConversationMemory]:
        """Every profile's conversation memory made so far (the live conversations are in them)."""
        return [memory for memory in self._memories.values() if memory is not None]

    def reassign(self, device_id: str, profile: str | None) -> list[dict[str, Any]]:
        """The device's live sessions switch to `profile` (None: the config's) at their next turn."""
        sessions = [(session_id, connection.device_id) for session_id, connection in self.transport.connections.items()]
        return self.profiles.reassign(device_id, profile, sessions)

    async def _build_pipeline(self, context: DeviceContext) -> Pipeline:
        return await build_session_pipeline(self, context)

    async def start(self) -> None:
        await self.store.open()  # first: a damaged or locked state file stops the start before models load
        await self.pairings.load(import_legacy=self.serve_http)  # a worker's supervisor imports
        await self.directory.start(forget=self.serve_http)  # a worker's supervisor forgets its entries
        if self.serve_http:  # with workers, the supervisor keeps the store tidy
            self._pruner = asyncio.create_task(
                prune_history_forever(self.store, self.config.memory), name="vixio-prune-history"
            )
        if not self._custom_factory:
            await self.voice.load()  # models load once, before the first device connects
        if self.vision.model is not None:
            await self.vision.model.load()
        freeze_startup_heap()
        self._accept_throttle = install_accept_error_throttle()
        if self.serve_http:  # with workers, the supervisor (which serves OTA) warns once
            warn_about_open_tokens(self.config)
            warn_about_trusted_macs(self.config.xiaozhi)
            warn_when_model_has_no_tools(self.config)
        await self.transport.start()
        await self.mqtt.start()
        self.reminders.start()
        if not self.serve_http:
            logger.info("worker ready: WebSocket port {}", self.transport.port)
            return
        for route in self.session_routes:
            self.ota.add_route(route.method, route.path, route.handler)
        await self.ota.start()
        self.transport.http_port = self.ota.port  # for the vision URL given to devices
        logger.info("WebSocket server on {}:{} (any path)", self.config.xiaozhi.host, self.transport.port)
        log_http_urls(self.config.xiaozhi.http.host, self.ota.port, self.config)

    async def push_to_idle_device(self, device_id: str, message: dict[str, Any]) -> bool:
        """Send a JSON message to a device over MQTT, from any worker or instance (vixio/app/mqtt.py,
        `MqttService.push_to_idle_device`): True once delivered to its MQTT connection, False when it
        is not MQTT-reachable (WebSocket-only or offline; then deliver at its next session)."""
        return await self.mqtt.push_to_idle_device(device_id, message)

    def replying(self) -> int:
        """Sessions whose reply is being made or spoken now."""
        return sum(
            1
            for connection in self.transport.connections.values()
            if connection.speaking or connection.session is not None and connection.session.pipeline.turn_in_progress
        )

    async def drain(self, timeout: float) -> None:
        """A graceful stop's first step (SIGTERM): close the HTTP port (health checks fail), take
        no new device, and let the replies being made or spoken finish, for at most `timeout` s."""
        await self.ota.stop()
        self.transport.stop_accepting()
        self.mqtt.stop_accepting()
        deadline = time.monotonic() + timeout
        if busy := self.replying():
            logger.info(
                "draining: {} repl{} being made or spoken; waiting up to {:g} s",
                busy,
                "y" if busy == 1 else "ies",
                timeout,
            )
        while self.replying() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if busy := self.replying():
            logger.warning(
                "drain: {} repl{} still running after {:g} s (server.drain_timeout); cutting off",
                busy,
                "y" if busy == 1 else "ies",
                timeout,
            )

    async def stop(self) -> None:
        self.console.stop_streams()  # open console pages would hold the HTTP server's shutdown
        limit = self.config.server.shutdown_timeout
        await shutdown.step("the HTTP port", self.ota.stop())  # safe when it never started (a worker)
        await shutdown.step("MQTT", self.mqtt.stop())  # its sessions get `goodbye` before the transport closes them
        await shutdown.step("the sessions", self.transport.stop(), limit)
        await shutdown.step("background tool results", self.task_results.close())
        await shutdown.step("reminders", self.reminders.close())
        await shutdown.step("the session directory", self.directory.close())  # the closed sessions' entries are removed
        await shutdown.step("the console", self.console.close())
        await shutdown.step("the voice models", self.voice.close())
        if self._accept_throttle is not None:
            self._accept_throttle.uninstall()
            self._accept_throttle = None
        if self._pruner is not None:
            self._pruner.cancel()
            with suppress(asyncio.CancelledError):
                await self._pruner
            self._pruner = None
        for memory in self._memories.values():
            if memory is not None:  # the long-term memory of the sessions just closed
                await shutdown.step("long-term memory", memory.close(), shutdown.STEP_LIMIT + 2)
        await shutdown.step("the state store", self.store.close())  # last: closing sessions store their last turns

    async def __aenter__(self) -> VixioServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


async def serve(config: VixioConfig) -> None:
    """Run until SIGINT (stop now) or SIGTERM (let replies finish first: `server.drain_timeout`)."""
    stop = asyncio.Event()
    signals: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        signals.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal, sig)
    async with VixioServer(config) as server:
        await stop.wait()
        if signals[:1] == [signal.SIGTERM]:
            await server.drain(config.server.drain_timeout)
        logger.info("shutting down")
    if isinstance(config.agent, LocalLlamaAgentConfig):
        # Freed now: left to the interpreter's exit, llama-cpp's __del__ prints a traceback.
        from vixio.providers.agent.llama.weights import close_models

        close_models()
