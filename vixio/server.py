"""The application layer: wires config, transport, OTA and the per-session pipeline together.

This is the only module that knows both a transport and what goes into a pipeline; transports
and providers never import each other (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from contextlib import suppress

from aiohttp import web
from loguru import logger

from vixio.config.models import VixioConfig
from vixio.core.pipeline import Pipeline
from vixio.transports.xiaozhi.auth import DeviceAuthenticator
from vixio.transports.xiaozhi.ota import OtaServer
from vixio.transports.xiaozhi.transport import DeviceContext, PipelineFactory, XiaozhiTransport
from vixio.core.tools.types import ToolDefinition
from vixio.session_tools import SessionTools
from vixio.transports.xiaozhi.device_tools import VISION_PATH
from vixio.vision import VisionRoute
from vixio.voice import VoiceStack


class VixioServer:
    """The WebSocket server and the OTA/HTTP server of one process."""

    def __init__(self, config: VixioConfig, pipeline_factory: PipelineFactory | None = None) -> None:
        self.config = config
        self.authenticator = DeviceAuthenticator(config.xiaozhi.auth)
        self.transport = XiaozhiTransport(
            config.xiaozhi, pipeline_factory or self._build_pipeline, authenticator=self.authenticator
        )
        self.ota = OtaServer(config.xiaozhi, self.authenticator, websocket_port=lambda: self.transport.port)
        self.voice = VoiceStack(config)
        self._custom_factory = pipeline_factory is not None
        self.ota.add_route("GET", "/metrics", self._metrics)
        self.vision = VisionRoute(config.vision, self.authenticator)
        self.ota.add_route("POST", VISION_PATH, self.vision.handle)
        self.transport.server_tools = self._server_tool  # registerTools main_type "local"
        self.tools: dict[str, SessionTools] = {}
        """Live sessions' tools by session id."""

    async def _metrics(self, request: web.Request) -> web.Response:
        """Live sessions and the latency marks of their recent turns (ms from the first mark)."""
        sessions = []
        for session_id, connection in self.transport.connections.items():
            session = connection.session
            turns = [] if session is None else [
                {"turn": turn.turn_id, "ms": turn.durations()} for turn in session.state.turns]
            tools = self.tools.get(session_id)
            sessions.append({"session_id": session_id, "device_id": connection.device_id,
                             "speaking": connection.speaking, "turns": turns,
                             "tools": tools.toolset.sources() if tools is not None else {}})
        return web.json_response({"sessions": len(sessions), "detail": sessions})

    def _server_tool(self, name: str) -> ToolDefinition | None:
        """A tool this server provides to every session (local, process-scoped MCP), by name."""
        candidates = list(self.voice.local_tools)
        if self.voice.mcp is not None:
            candidates += [tool for tools in self.voice.mcp.process_tools().values() for tool in tools]
        return next((tool for tool in candidates if tool.name == name), None)

    async def _build_pipeline(self, context: DeviceContext) -> Pipeline:
        session_id = context.session_id
        tools = self.voice.session_tools(session_id, device_id=context.identity.device_id)
        if tools is not None:
            self.tools[session_id] = tools

            async def forget() -> None:
                self.tools.pop(session_id, None)

            tools.add_closer(forget)
            # Device (MCP) and registerTools tools join the session's tools when they are known.
            context.transport.set_device_tools_callback(context.session_id, tools.on_device_tools)
        return self.voice.build_pipeline(context.session_id, tools=tools)

    async def start(self) -> None:
        if not self._custom_factory:
            await self.voice.load()  # models load once, before the first device connects
        if self.vision.model is not None:
            await self.vision.model.load()
        await self.transport.start()
        await self.ota.start()
        self.transport.http_port = self.ota.port  # for the vision URL given to devices
        http = self.config.xiaozhi.http
        logger.info("WebSocket server on {}:{} (any path)", self.config.xiaozhi.host, self.transport.port)
        host = lan_address() if http.host in ("0.0.0.0", "::", "") else http.host
        logger.info("OTA server on {}:{}. Put this OTA URL into your device: http://{}:{}/xiaozhi/ota/",
                    http.host, self.ota.port, host, self.ota.port)

    async def stop(self) -> None:
        await self.ota.stop()
        await self.transport.stop()
        await self.voice.close()

    async def __aenter__(self) -> VixioServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def lan_address() -> str:
    """This machine's first non-loopback IPv4 address as the resolver knows it (sends nothing)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    for info in infos:
        address = str(info[4][0])
        if not address.startswith("127."):
            return address
    return "<this-machine's-LAN-IP>"


async def serve(config: VixioConfig) -> None:
    """Run until SIGINT/SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with VixioServer(config):
        await stop.wait()
        logger.info("shutting down")
