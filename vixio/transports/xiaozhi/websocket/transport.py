"""The Xiaozhi WebSocket server (the `websockets` library, asyncio, no thread per connection).

Per connection: authenticate at the handshake (HTTP 401 without upgrade on failure), wait up to
`hello_timeout` for the device's hello, answer it before any slow work, then build the session's
pipeline and serve messages until the socket closes or the session goes idle. Any path is
accepted: the firmware connects to whatever URL OTA gave it. Each session's socket reads and
writes, and the messages the server sends on its own, are session_io.py; the handshake and the
hello are opening.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loguru import logger
from websockets.asyncio.server import Server, ServerConnection, serve

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.pipeline import Pipeline
from vixio.core.protocol import Message
from vixio.core.session import Session, fan_out
from vixio.core.tools.limits import ToolBudget
from vixio.metrics import SESSIONS, SESSIONS_STARTED
from vixio.patches.websockets import DirectConnection, connection_class
from vixio.transports.xiaozhi.companions.pairing import CompanionRegistry
from vixio.transports.xiaozhi.companions.policy import PairingPolicy
from vixio.transports.xiaozhi.companions.store import PairingStore
from vixio.transports.xiaozhi.http.hosts import derive_vision_url
from vixio.transports.xiaozhi.mcp.device_tools import XiaozhiDeviceToolClient
from vixio.transports.xiaozhi.mcp.register_tools import RegisterToolsClient, ServerTools
from vixio.transports.xiaozhi.protocol import messages as xp
from vixio.transports.xiaozhi.protocol.framing import SUPPORTED_VERSIONS
from vixio.transports.xiaozhi.session.auth import (
    DeviceAuthenticator,
    DeviceIdentity,
)
from vixio.transports.xiaozhi.session.connection import XiaozhiConnection
from vixio.transports.xiaozhi.session.early_audio import EarlyAudio
from vixio.transports.xiaozhi.session.identity import IdentityPins, IdentityRefused
from vixio.transports.xiaozhi.websocket.log import websockets_logger
from vixio.transports.xiaozhi.websocket.opening import XiaozhiOpening
from vixio.transports.xiaozhi.websocket.session_io import SessionChannel


@dataclass(slots=True)
class DeviceContext:
    """What a pipeline factory knows about the device it builds a pipeline for."""

    session_id: str
    identity: DeviceIdentity
    hello: Message
    protocol_version: int
    transport: XiaozhiTransport
    features: dict[str, Any] = field(default_factory=dict)
    greeting: Callable[[], str] | None = None
    """Set by the factory: what this session answers the wake word with (e.g. its profile's
    greeting); None: `xiaozhi.greeting`."""


PipelineFactory = Callable[[DeviceContext], Awaitable[Pipeline]]


class SessionListener(Protocol):
    """Told of every session as it starts (after the hello) and ends; must not block."""

    def session_started(self, device_id: str, session_id: str, companion: bool) -> None: ...

    def session_ended(self, session_id: str) -> None: ...


class XiaozhiTransport(XiaozhiOpening):
    """WebSocket server for Xiaozhi devices (each session's socket I/O: session_io.py; handshake and hello: opening.py)."""

    def __init__(
        self,
        config: XiaozhiConfig,
        pipeline_factory: PipelineFactory,
        *,
        authenticator: DeviceAuthenticator | None = None,
        pairings: PairingStore | None = None,
    ) -> None:
        """`pairings`: where companion approvals live (the app passes the state store's); None
        reads `pairing.state_file`."""
        super().__init__(xp.XiaozhiProtocol(1, max_json_depth=config.max_json_depth))
        self.config = config
        self.authenticator = authenticator or DeviceAuthenticator(config.auth)
        self._pipeline_factory = pipeline_factory
        self._server: Server | None = None
        self.connections: dict[str, XiaozhiConnection] = {}
        """Live sessions by session id."""
        self.device_tools: dict[str, XiaozhiDeviceToolClient] = {}
        """Device MCP tool clients by session id (devices whose hello has `features.mcp`)."""
        self.register_clients: dict[str, RegisterToolsClient] = {}
        """`mcp/registerTools` clients by session id (every session has one; see register_tools.py)."""
        self.http_port: int | None = None
        """The bound OTA/HTTP port, for the derived vision URL when `http.port` is 0; set by the app."""
        self._refusals = 0
        self.adopt_path = ""
        """A worker's transport: no port of its own; it serves the connections the supervisor hands
        over (vixio/serve/dispatch.py) and listens only on this private Unix socket path."""
        self.encode_on_thread = True
        """Encode downlink Opus on the codec thread (worth it only with a core to spare; VixioServer
        turns it off when every core runs a worker). Off: each frame is encoded on the loop when due."""
        self.companions = CompanionRegistry(PairingPolicy.from_config(config, pairings))
        """Seed 002 companions paired with devices by MAC, if they may (pairing.py)."""
        self.server_tools: ServerTools | None = None
        """Server-side tools by name, for registerTools `main_type: "local"` entries; set by the app."""
        self.on_device_session: Callable[[str, str], None] | None = None
        """Called with (device id, session id) once a device's session has started; set by the app."""
        self.registration_rate: Callable[[str], Awaitable[bool]] | None = None
        """Counts each registerTools request by Device-Id over every connection (vixio/state/limits.py)."""
        self.sessions_seen: SessionListener | None = None
        """Told of every session (devices and companions) as it starts and ends (the live-session directory)."""
        self.identities: IdentityPins | None = None
        """Who each Device-Id is (identity.py): a claimant is served under an id of its own; set by the app."""

    # --- server lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        where: dict[str, Any] = (
            {"unix": True, "path": self.adopt_path}
            if self.adopt_path
            else {"host": self.config.host, "port": self.config.port}
        )
        self._server = await serve(
            self._handle,
            **where,
            process_request=self._process_request,
            create_connection=connection_class(),  # microphone frames handled as they are parsed
            max_size=self.config.max_message_bytes,
            compression=None,  # Opus does not compress; deflate would only cost CPU
            ping_interval=30,
            ping_timeout=30,
            logger=websockets_logger(),  # one short line per event (bare TCP health checks: DEBUG)
        )

    @property
    def websocket_server(self) -> Server:
        """The running WebSocket server (a worker adopts handed-over connections into it)."""
        if self._server is None:
            raise RuntimeError("the transport is not started")
        return self._server

    def stop_accepting(self) -> None:
        """Take no new connection; the open ones go on (a graceful stop's drain)."""
        if self._server is not None:
            self._server.server.close()  # the listening socket only: asyncio leaves accepted ones open

    async def stop(self) -> None:
        if self._server is not None:
            stopped = [sid for sid, connection in list(self.connections.items()) if await connection.shutdown()]
            if stopped:  # `tts stop` before close 1001, or the device stays "speaking"
                await self.flush_writes(stopped, timeout=1.0)
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the transport is not started")
        if self.adopt_path:
            return self.config.port  # the supervisor's port, which it accepts on
        return int(next(iter(self._server.sockets)).getsockname()[1])

    async def close_session(self, session_id: str, reason: str) -> bool:
        """Close a device's live session (code 1000, `reason`); False if there is none here (or it
        is a companion's)."""
        register = self.register_clients.get(session_id)
        if session_id not in self.connections or register is None or register.is_companion:
            return False
        await self._do_close(session_id, 1000, reason)
        return True

    # --- one connection -----------------------------------------------------------------------

    async def serve_channel(self, channel: SessionChannel) -> None:
        """Serve one session over a non-WebSocket channel (mqtt/channel.py) from its hello on,
        exactly as a WebSocket session; returns when it ends."""
        await self._handle(channel)

    async def _handle(self, socket: ServerConnection | SessionChannel) -> None:
        accepted = time.perf_counter()
        identity: DeviceIdentity = socket.vixio_identity  # type: ignore[union-attr]
        if self.identities is not None:  # before anything keyed by the device id
            try:
                identity = await self.identities.resolve(identity)
            except IdentityRefused as exc:
                logger.bind(device=identity.device_id).warning("connection refused: {}", exc)
                await socket.close(1008, "identity refused")
                return
        session_id = str(uuid.uuid4())
        self._sockets[session_id] = socket
        if identity.protocol_version in SUPPORTED_VERSIONS:
            self._protocols[session_id] = xp.XiaozhiProtocol(
                identity.protocol_version, max_json_depth=self.config.max_json_depth
            )
        budget = ToolBudget(self.config.mcp.limits)  # shared by the session's peer tool sources
        self.open_session_io(session_id, identity.device_id)
        if isinstance(socket, DirectConnection) or not isinstance(socket, ServerConnection):
            socket.receiver = lambda data: self.receive_now(session_id, data)
        # Before the hello wait: the read worker routes MCP frames as they arrive, so a
        # registration sent with (or before) the hello reaches its client.
        register = RegisterToolsClient(
            session_id,
            lambda payload, envelope: self.write(session_id, xp.mcp(payload, envelope)),
            call_timeout=self.config.mcp.tool_call_timeout,
            limits=self.config.mcp.limits,
            budget=budget,
        )
        register.device_id, register.client_id = identity.device_id, identity.client_id[:128]
        register.server_tools = self.server_tools
        register.device_rate = self.registration_rate
        register.on_registered = self.companions.registered
        self.register_clients[session_id] = register
        self.add_mcp_peer(session_id, register)
        connection: XiaozhiConnection | None = None
        session: Session | None = None
        log = self._io[session_id].logger
        try:
            hello = await self._wait_for_hello(session_id, register.registered_event)
            if hello is None and register.registered and register.is_companion:
                hello = {"type": "hello", "version": identity.protocol_version, "features": {}}  # registerTools only
                log.info("a registerTools companion for {} without a hello: served without audio", register.mac_addr)
            if hello is None:
                log.info("closed: no hello within {}s", self.config.hello_timeout)
                return
            version = self._negotiate_version(identity, hello, log)
            protocol = xp.XiaozhiProtocol(version, max_json_depth=self.config.max_json_depth)
            self._protocols[session_id] = protocol
            # Answer before any slow work: the device gives up after 10 s.
            await self.write(session_id, xp.server_hello(session_id, version))
            log.info(
                "hello answered {:.1f} ms after connect (protocol v{}, features {})",
                (time.perf_counter() - accepted) * 1000,
                version,
                hello.get("features") or {},
            )
            connection = XiaozhiConnection(
                session_id,
                identity.device_id,
                self.config,
                protocol,
                lambda messages: self.write_many(session_id, messages),
                encode_on_thread=self.encode_on_thread,
            )
            offered = hello.get("features")
            features: dict[str, Any] = offered if isinstance(offered, dict) else {}
            if getattr(socket, "audio_apart", False):
                connection.early_audio = EarlyAudio()
            if features.get("aec") is True and self.config.server_aec:
                connection.enable_echo_cancellation(version, double_talk=self.config.server_aec_double_talk)
            context = DeviceContext(session_id, identity, hello, version, self, dict(features))
            pipeline = await self._pipeline_factory(context)
            connection.greeting = context.greeting
            session = Session(
                session_id, pipeline, fan_out(connection.on_output, register.on_output), device_id=identity.device_id
            )
            session.state.device.update(
                device_id=identity.device_id,
                client_id=identity.client_id,
                protocol_version=version,
                features=context.features,
            )
            await session.start()
            connection.attach(session)
            self.connections[session_id] = connection
            SESSIONS.inc()
            SESSIONS_STARTED.inc()
            self.set_inline_handler(session_id, connection.handle_now)  # audio frames skip the read loop
            # After the pipeline factory registered its tools callback; earlier registrations are delivered now.
            await register.set_tools_callback(lambda defs: self.notify_device_tools_ready(session_id, defs))
            self._start_device_tools(session_id, identity, context, socket, budget)
            if self.sessions_seen is not None:
                self.sessions_seen.session_started(identity.device_id, session_id, register.is_companion)
            if not register.is_companion:  # a device: companions naming its MAC pair with it
                self.companions.device_connected(identity.device_id, register)
                if self.on_device_session is not None:
                    self.on_device_session(identity.device_id, session_id)
            await self._serve(session_id, connection, log)
        except Exception:
            log.exception("session failed")
        finally:
            if self.sessions_seen is not None and session_id in self.connections:
                self.sessions_seen.session_ended(session_id)
            self.register_clients.pop(session_id, None)
            self.companions.companion_left(register)
            self.companions.device_disconnected(identity.device_id, register)
            register.cancel_all()  # pending registerTools calls fail now, not at their timeout
            if self.connections.pop(session_id, None) is not None:
                SESSIONS.dec()
            device_tools = self.device_tools.pop(session_id, None)
            if device_tools is not None:
                await device_tools.close()  # no pending tool call outlives the session
            if connection is not None:
                await connection.close()
            if session is not None:
                await session.close()
            await self.close_session_io(session_id)
            self._sockets.pop(session_id, None)
            self._protocols.pop(session_id, None)
            await socket.close()

    def _start_device_tools(
        self,
        session_id: str,
        identity: DeviceIdentity,
        context: DeviceContext,
        socket: ServerConnection | SessionChannel,
        budget: ToolBudget,
    ) -> None:
        """Start listing the device's MCP tools in the background (after the pipeline factory,
        so its tools callback is registered first). A peer the factory set itself is kept."""
        if not context.features.get("mcp") or self._io[session_id].mcp_peer is not None:
            return
        mcp = self.config.mcp
        host = socket.request.headers.get("Host", "") if socket.request is not None else ""
        local = socket.local_address[0] if socket.local_address else None
        vision = {
            "url": derive_vision_url(self.config, host, self.http_port, local_address=local),
            "token": self.authenticator.token_for(identity.client_id, identity.device_id),
        }
        client = XiaozhiDeviceToolClient(
            session_id,
            lambda payload: self.send_mcp(session_id, payload),
            timeout=mcp.tool_call_timeout,
            list_timeout=mcp.list_timeout,
            vision=vision,
            on_tools_changed=lambda defs: self.notify_device_tools_ready(session_id, defs),
            device_id=identity.device_id,
            limits=mcp.limits,
            budget=budget,
        )
        self.device_tools[session_id] = client
        self.set_mcp_peer(session_id, client)
        client.start()

    async def _serve(self, session_id: str, connection: XiaozhiConnection, log: Any) -> None:
        reader = asyncio.create_task(self._read_loop(session_id, connection), name=f"vixio-{session_id}-dispatch")
        waiters: set[asyncio.Task[Any]] = {reader}
        if self.config.idle_timeout > 0:
            waiters.add(asyncio.create_task(connection.wait_idle(), name=f"vixio-{session_id}-idle"))
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if reader not in done:
                log.info("closing: no speech for {}s", self.config.idle_timeout)
                await connection.say_goodbye()
        finally:
            for task in waiters:
                task.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _read_loop(self, session_id: str, connection: XiaozhiConnection) -> None:
        while True:
            message = await self.read(session_id)
            if message is None:
                return
            try:
                await connection.handle(message)
            except Exception:
                # One bad message must not end the session.
                connection.logger.exception("failed to handle {!r}", message.get("type"))
