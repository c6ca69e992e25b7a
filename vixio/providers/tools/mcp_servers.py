"""Third-party MCP servers as a tool source: stdio child processes and HTTP endpoints.

    pool = McpServerPool(config.tools.mcp_servers)
    await pool.start()                                  # process-scoped servers, concurrently
    for key, tools in pool.process_tools().items():     # "mcp:<name>" → definitions
        toolset.set_tools(key, tools)
    session = await pool.open_session(session_id)       # session-scoped servers
    ...
    await session.close()                               # when the session ends
    await pool.close()                                  # when the server stops

Each configured server is one `McpServerTools`: it connects through openai-agents'
`MCPServerStdio` / `MCPServerStreamableHttp` / `MCPServerSse` (which bridge `mcp` 1.x and 2.x),
lists the tools as vixio `ToolDefinition`s (source "mcp", origin = the server's name) and runs
calls for the `ToolExecutor`. A server that does not start is logged and left out; the others
keep working. A call never raises (except cancellation): failures become results the model
can read. A call that finds the connection gone (the process crashed, the HTTP server went
away) fails, and the next call starts the server again.
"""

from __future__ import annotations

import asyncio
import copy
import shlex
import time
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loguru import logger

from vixio.config.mcp import McpServerConfig, McpStdioServerConfig
from vixio.core.tools.types import EMPTY_SCHEMA, ToolCallResult, ToolDefinition
from vixio.providers.tools.mcp_results import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    call_result,
    describe_error,
    error_code,
    model_field,
)

if TYPE_CHECKING:
    from agents.mcp import MCPServer


def source_key(server_name: str) -> str:
    """The `ToolSet` source key of a server's tools."""
    return f"mcp:{server_name}"


class McpServerError(Exception):
    """A server could not be started or reached; the message is for people."""


class McpServerTools:
    """One configured MCP server: connection, tool list and calls."""

    def __init__(self, name: str, config: McpServerConfig, *, session_id: str = "") -> None:
        self.name = name
        self.config = config
        self.tools: list[ToolDefinition] = []
        """The offered tools as last listed (after `tools` / `exclude`)."""
        self._server: MCPServer | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._closed = False
        self._log = logger.bind(session=session_id or "-", component="mcp")

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @property
    def target(self) -> str:
        """What is started or reached, for logs (no headers, no query string)."""
        if isinstance(self.config, McpStdioServerConfig):
            return shlex.join([self.config.command, *self.config.args])
        url = urlsplit(self.config.url)
        return f"{url.scheme}://{url.hostname}{f':{url.port}' if url.port else ''}{url.path} ({self.config.transport})"

    @property
    def is_stdio(self) -> bool:
        return isinstance(self.config, McpStdioServerConfig)

    @property
    def connected(self) -> bool:
        return self._server is not None

    # --- lifecycle ----------------------------------------------------------------------------

    async def connect(self) -> None:
        """Start (or reach) the server and list its tools; raises `McpServerError` on failure."""
        async with self._lock:
            self._closed = False
            if self._server is None:
                started = time.perf_counter()
                await self._start()
                try:
                    await self.list_tools()
                except BaseException:
                    await self._shutdown()
                    raise
                self._log.info(
                    "MCP server {} ({}) ready in {:.0f} ms with {} tools: {}",
                    self.name,
                    self.target,
                    (time.perf_counter() - started) * 1000,
                    len(self.tools),
                    ", ".join(t.name for t in self.tools) or "none",
                )

    async def list_tools(self) -> list[ToolDefinition]:
        """Fetch the server's tools; returns (and keeps in `tools`) the ones the config offers."""
        server = self._server
        if server is None:
            raise McpServerError(f"MCP server '{self.name}' is not connected")
        try:
            async with asyncio.timeout(self.config.startup_timeout):
                listed = await server.list_tools()
        except TimeoutError:
            raise McpServerError(f"no tools/list answer within {self.config.startup_timeout:g} s") from None
        except Exception as exc:
            raise McpServerError(f"tools/list failed: {describe_error(exc)}") from exc
        names = [tool.name for tool in listed]
        self._warn_unmatched(names)
        self.tools = [self._definition(tool) for tool in listed if self.offers(tool.name)]
        return list(self.tools)

    async def close(self) -> None:
        """Disconnect; a stdio server's process is stopped (stdin closed, then terminated)."""
        async with self._lock:
            self._closed = True
            await self._shutdown()

    async def _start(self) -> None:
        server = self._make_server()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        owner = asyncio.create_task(self._own(server, ready, self._stop), name=f"vixio-mcp-{self.name}")
        try:
            async with asyncio.timeout(self.config.startup_timeout):
                await asyncio.shield(ready)
        except BaseException as exc:
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: it is reported below, or superseded by the timeout
            if isinstance(exc, asyncio.CancelledError):
                raise
            if isinstance(exc, TimeoutError):
                raise McpServerError(f"no answer within {self.config.startup_timeout:g} s") from None
            raise McpServerError(describe_error(exc, stdio=self.is_stdio)) from exc
        self._server, self._owner = server, owner

    async def _own(self, server: MCPServer, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        # One task enters and leaves the connection: mcp 1.x's anyio cancel scopes must be
        # exited by the task that entered them, and start/close run in different tasks.
        try:
            await server.connect()  # type: ignore[no-untyped-call]  # agents' MCPServer.connect is unannotated; cleans up after itself when it fails
        except asyncio.CancelledError:
            ready.cancel()
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            await stop.wait()
        finally:
            try:
                await server.cleanup()  # type: ignore[no-untyped-call]  # unannotated in agents' MCPServer
            except Exception as exc:
                self._log.warning("MCP server {}: closing failed: {}", self.name, describe_error(exc))

    async def _shutdown(self) -> None:
        owner, self._owner, self._server = self._owner, None, None
        if owner is not None:
            self._stop.set()
            await asyncio.gather(owner, return_exceptions=True)

    def _make_server(self) -> MCPServer:
        from agents.mcp import MCPServerSse, MCPServerStdio, MCPServerStreamableHttp

        config = self.config
        # The SDK's own per-request limit is only a backstop (it also covers the handshake):
        # connect and call_tool enforce startup_timeout and timeout themselves.
        backstop = max(config.timeout, config.startup_timeout)
        if isinstance(config, McpStdioServerConfig):
            stdio: Any = {"command": config.command, "args": list(config.args), "env": dict(config.env)}
            if config.cwd:
                stdio["cwd"] = config.cwd
            return MCPServerStdio(stdio, name=self.name, client_session_timeout_seconds=backstop)
        http: Any = {"url": config.url, "headers": dict(config.headers), "timeout": backstop}
        server_class = MCPServerSse if config.transport == "sse" else MCPServerStreamableHttp
        return server_class(http, name=self.name, client_session_timeout_seconds=backstop)

    # --- tools --------------------------------------------------------------------------------

    def offers(self, tool_name: str) -> bool:
        """Whether the config's `tools` / `exclude` lists let the model see this tool."""
        if any(fnmatchcase(tool_name, pattern) for pattern in self.config.exclude):
            return False
        allowed = self.config.tools
        return allowed is None or any(fnmatchcase(tool_name, pattern) for pattern in allowed)

    def _warn_unmatched(self, names: list[str]) -> None:
        for key, patterns in (("tools", self.config.tools or []), ("exclude", self.config.exclude)):
            unmatched = [p for p in patterns if not any(fnmatchcase(name, p) for name in names)]
            if unmatched:
                self._log.warning(
                    "MCP server {}: {} entries {} match none of its tools ({})",
                    self.name,
                    key,
                    unmatched,
                    ", ".join(names) or "none",
                )

    def _definition(self, tool: Any) -> ToolDefinition:
        schema = model_field(tool, "input_schema", "inputSchema")
        annotations = getattr(tool, "annotations", None)
        read_only = getattr(annotations, "readOnlyHint", None) if annotations is not None else None
        return ToolDefinition(
            name=tool.name,
            description=tool.description or getattr(tool, "title", None) or "",
            parameters=copy.deepcopy(schema) if schema else dict(EMPTY_SCHEMA),
            source="mcp",
            client=self,
            origin=self.name,
            read_only=read_only if isinstance(read_only, bool) else None,
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Run a tool by the server's name for it. Never raises except `CancelledError`."""
        if not self.offers(name):
            return ToolCallResult.fail(f"the tool {name} of MCP server '{self.name}' is turned off in the config")
        server: MCPServer | None = None
        try:
            server = await self._usable_server()
            async with asyncio.timeout(self.timeout):
                result = await server.call_tool(name, arguments)
        except asyncio.CancelledError:
            raise
        except McpServerError as exc:
            return ToolCallResult.fail(f"MCP server '{self.name}' could not run {name}: {exc}")
        except Exception as exc:
            if isinstance(exc, TimeoutError) or error_code(exc) == REQUEST_TIMEOUT:
                return ToolCallResult.fail(f"MCP server '{self.name}' did not answer {name} within {self.timeout:g} s")
            reason = describe_error(exc, stdio=self.is_stdio)
            self._log.warning("MCP server {} ({}): {} failed: {}", self.name, self.target, name, reason)
            if server is not None and error_code(exc) in (None, CONNECTION_CLOSED):
                # Anything but a JSON-RPC error from a live server may mean the connection is
                # gone: drop it now (a crashed child is reaped) and reconnect on the next call.
                await self._drop(server)
            return ToolCallResult.fail(f"MCP server '{self.name}' could not run {name}: {reason}")
        return call_result(result)

    async def _drop(self, server: MCPServer) -> None:
        async with self._lock:
            if self._server is server:
                await self._shutdown()

    async def _usable_server(self) -> MCPServer:
        """The connection, started again when a call found it gone."""
        async with self._lock:
            if self._closed:
                raise McpServerError("it is closed")
            if self._server is not None:
                return self._server
            self._log.info("MCP server {} ({}): connecting again", self.name, self.target)
            try:
                await self._start()
            except McpServerError as exc:
                raise McpServerError(f"it stopped and did not start again: {exc}") from None
            assert self._server is not None
            return self._server


class McpSessionServers:
    """The session-scoped servers of one device session: fresh connections, closed with it."""

    def __init__(
        self,
        session_id: str,
        configs: Mapping[str, McpServerConfig],
        on_close: Callable[[McpSessionServers], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.configs = dict(configs)
        self.servers: dict[str, McpServerTools] = {}
        self.failures: dict[str, str] = {}
        self._on_close = on_close

    async def connect(self) -> None:
        self.servers, self.failures = await connect_all(self.configs, session_id=self.session_id)

    def tools(self) -> dict[str, list[ToolDefinition]]:
        """Tools by `ToolSet` source key ("mcp:<name>")."""
        return {source_key(name): list(server.tools) for name, server in self.servers.items()}

    async def close(self) -> None:
        servers, self.servers = list(self.servers.values()), {}
        await asyncio.gather(*(server.close() for server in servers), return_exceptions=True)
        if self._on_close is not None:
            self._on_close(self)


class McpServerPool:
    """Every configured MCP server: the process-scoped ones run for the whole server's life,
    the session-scoped ones are started per session by `open_session`."""

    def __init__(self, configs: Mapping[str, McpServerConfig]) -> None:
        self.configs = dict(configs)
        self.servers: dict[str, McpServerTools] = {}
        """Connected process-scoped servers by name."""
        self.failures: dict[str, str] = {}
        """Process-scoped servers that did not start: name → what was tried and why it failed."""
        self._sessions: set[McpSessionServers] = set()

    def _enabled(self, scope: str) -> dict[str, McpServerConfig]:
        return {name: config for name, config in self.configs.items() if config.enabled and config.scope == scope}

    async def start(self) -> None:
        """Connect every enabled process-scoped server concurrently; failures are logged and
        recorded in `failures`, never raised."""
        self.servers, self.failures = await connect_all(self._enabled("process"))

    def process_tools(self) -> dict[str, list[ToolDefinition]]:
        """Tools of the process-scoped servers by `ToolSet` source key ("mcp:<name>")."""
        return {source_key(name): list(server.tools) for name, server in self.servers.items()}

    @property
    def has_session_servers(self) -> bool:
        return bool(self._enabled("session"))

    async def open_session(self, session_id: str) -> McpSessionServers:
        """Start this session's own servers; close the result when the session ends."""
        session = McpSessionServers(session_id, self._enabled("session"), on_close=self._sessions.discard)
        self._sessions.add(session)
        try:
            await session.connect()  # cancelled (the session ended first): nothing is left running
        except BaseException:
            self._sessions.discard(session)
            raise
        return session

    async def close(self) -> None:
        """Close every server, session-scoped ones included."""
        servers, self.servers = list(self.servers.values()), {}
        closing = [session.close() for session in list(self._sessions)] + [server.close() for server in servers]
        await asyncio.gather(*closing, return_exceptions=True)


async def connect_all(
    configs: Mapping[str, McpServerConfig],
    *,
    session_id: str = "",
) -> tuple[dict[str, McpServerTools], dict[str, str]]:
    """Connect servers concurrently: (connected by name, failures by name). When cancelled,
    the ones that did connect are closed again."""
    servers = {name: McpServerTools(name, config, session_id=session_id) for name, config in configs.items()}
    failures: dict[str, str] = {}
    log = logger.bind(session=session_id or "-", component="mcp")

    async def connect(server: McpServerTools) -> None:
        try:
            await server.connect()
        except Exception as exc:  # one server's failure, whatever it is, must not stop the others
            reason = str(exc) if isinstance(exc, McpServerError) else describe_error(exc)
            failures[server.name] = f"{server.target}: {reason}"
            log.error(
                "MCP server {} ({}) failed to start: {}; its tools are not offered", server.name, server.target, reason
            )

    try:
        async with asyncio.TaskGroup() as group:
            for server in servers.values():
                group.create_task(connect(server))
    except BaseException:
        await asyncio.gather(*(server.close() for server in servers.values()), return_exceptions=True)
        raise
    return {name: server for name, server in servers.items() if server.connected}, failures
