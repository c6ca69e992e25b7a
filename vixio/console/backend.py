"""What the operator console reads and does, behind one seam (`ConsoleBackend`).

The HTTP routes (`vixio.console.api`) never touch sessions themselves: they call a backend.
`LocalBackend` serves the sessions of this process. A server that spreads devices over worker
processes gives the routes a `FanOutBackend` (vixio.console.fan_out) over one backend per worker (a proxy that reaches
the worker's `LocalBackend`): it asks every worker for the sessions and the one that holds a
session for its detail, tools, execute and say; the routes stay the same.

Everything a backend returns is plain JSON data. Session-scoped calls raise `ConsoleError`
(404 for a session that is not here) rather than returning None.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vixio.core.tools.executor import ToolExecutor
from vixio.core.tools.policy import ToolPolicy
from vixio.core.tools.toolset import ToolSet
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition
from vixio.fleet.peers import CallError

if TYPE_CHECKING:
    from vixio.console.host import ConsoleHost
    from vixio.transports.xiaozhi.session.connection import XiaozhiConnection
    from vixio.voice.session_tools import SessionTools

MAX_SAY_CHARS = 1000
"""Longest sentence the Say box may type into a session."""
MAX_TOOL_NAME = 256
MAX_TOOL_LOG = 100
"""Tool calls remembered per session for the conversation view (oldest first to go)."""
MAX_TURNS = 50
"""Turns shown per session (the newest)."""
MAX_TEXT = 4000
"""Tool results and arguments longer than this are cut in the views (the executor keeps them whole)."""
THINKING_LIMIT = 120.0
"""Seconds after which a turn that never answered is no longer shown as thinking."""
SESSION_SOURCES = ("device", "register", "tasks")
"""ToolSet source keys that belong to one session (the rest are process-wide)."""
CONSOLE_CALL_PREFIX = "console"
"""Call ids of calls run from the console start with this."""


class ConsoleError(CallError):
    """A request the backend cannot serve; `status` is the HTTP status to answer with."""


class ConsoleBackend(Protocol):
    """Sessions and tools as the console sees them (one process, or every worker)."""

    async def sessions(self) -> list[dict[str, Any]]:
        """A summary of every live session (with a `version` that changes when its detail does)."""
        ...

    async def session(self, session_id: str) -> dict[str, Any]:
        """One session in full: summary, conversation by turn, latency marks."""
        ...

    async def tools(self, session_id: str | None) -> dict[str, Any]:
        """Every tool the agent of `session_id` could call (None: the process-wide tools)."""
        ...

    async def execute(self, session_id: str | None, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one call through the session's executor (None: the process-wide tools)."""
        ...

    async def say(self, session_id: str, text: str) -> dict[str, Any]:
        """Type `text` into the session as if the device had sent `listen detect`."""
        ...

    async def memory_changed(self, device_id: str, what: str, conversation: str = "", seq: int = -1) -> int:
        """The device's stored memory or history was edited: its live sessions follow (see
        `ConversationMemory.changed`); how many live conversations there were."""
        ...

    async def reassign(self, device_id: str, profile: str | None) -> list[dict[str, Any]]:
        """Switch the device's live sessions to `profile` (None: the config's) at their next turn;
        each session's id and profile."""
        ...


@dataclass(slots=True)
class _SessionLog:
    """Tool calls of one session as they finish, with when, how long and in which turn."""

    calls: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_TOOL_LOG))
    count: int = 0


class LocalBackend:
    """The sessions and tools of this process (its `ConsoleHost`, the `VixioServer`)."""

    def __init__(self, server: ConsoleHost) -> None:
        self.server = server
        self._logs: dict[str, _SessionLog] = {}
        self._connected_at: dict[str, float] = {}
        """Wall-clock connect time by session id, computed once (the summary must not drift)."""
        self._process_toolset: ToolSet | None = None
        self._process_executor: ToolExecutor | None = None

    # --- wiring --------------------------------------------------------------------------------

    def attach(self, session_id: str, tools: SessionTools) -> None:
        """Follow a new session's tool calls (the server calls this when it builds a pipeline)."""
        log = self._logs[session_id] = _SessionLog()

        def observe(request: ToolCallRequest, result: ToolCallResult, elapsed_ms: float) -> None:
            connection = self.server.transport.connections.get(session_id)
            turn = connection.session.pipeline.turn_id if connection and connection.session else 0
            entry = _call_entry(request, result, elapsed_ms)
            entry["turn"] = turn
            log.calls.append(entry)
            log.count += 1

        async def forget() -> None:
            self._logs.pop(session_id, None)

        tools.executor.observers.append(observe)
        tools.add_closer(forget)

    async def close(self) -> None:
        if self._process_executor is not None:
            await self._process_executor.close()

    # --- sessions ------------------------------------------------------------------------------

    async def sessions(self) -> list[dict[str, Any]]:
        live = self.server.transport.connections
        for gone in [key for key in self._connected_at if key not in live]:
            del self._connected_at[gone]
        return [self._summary(connection) for connection in list(live.values()) if connection.session is not None]

    async def session(self, session_id: str) -> dict[str, Any]:
        connection = self._connection(session_id)
        summary = self._summary(connection)
        assert connection.session is not None
        state = connection.session.state
        log = self._logs.get(session_id)
        turns: dict[int, dict[str, Any]] = {}

        def turn(turn_id: int) -> dict[str, Any]:
            return turns.setdefault(
                turn_id,
                {"turn": turn_id, "heard": [], "said": [], "interrupted": False, "tools": [], "marks": {}, "notes": {}},
            )

        for message in list(state.history):
            if message.role == "user":
                turn(message.turn_id)["heard"].append(message.content)
            elif message.role == "assistant":
                entry = turn(message.turn_id)
                entry["said"].append(message.content)
                entry["interrupted"] = entry["interrupted"] or message.interrupted
        console_calls = []
        for call in list(log.calls) if log is not None else []:
            # The agent's calls belong to its turn; the console's are run beside the conversation.
            if call["by"] == "console":
                console_calls.append(call)
            else:
                turn(call["turn"])["tools"].append(call)
        for metrics in list(state.turns):
            if metrics.marks:
                turn(metrics.turn_id)["marks"] = metrics.durations()
            if metrics.notes:
                turn(metrics.turn_id)["notes"] = dict(metrics.notes)
        ordered = [turns[key] for key in sorted(turns)][-MAX_TURNS:]
        return {
            **summary,
            "connected_seconds": round(time.monotonic() - connection.session.created_at, 1),
            "device": _jsonable(state.device),
            "conversation": ordered,
            "console_calls": console_calls,
        }

    def _summary(self, connection: XiaozhiConnection) -> dict[str, Any]:
        session = connection.session
        assert session is not None
        state = session.state
        tools = self.server.tools.get(connection.session_id)
        log = self._logs.get(connection.session_id)
        connected_at = self._connected_at.get(connection.session_id)
        if connected_at is None:
            connected_at = round(time.time() - (time.monotonic() - session.created_at), 3)
            self._connected_at[connection.session_id] = connected_at
        activity = self._activity(connection)
        last = state.history[-1] if state.history else None
        # Marks and notes of a turn may be replaced (a preemptive attempt replacing a cancelled one).
        marks = (
            f"{sum(len(turn.marks) + len(turn.notes) for turn in state.turns)}."
            f"{max((at for turn in state.turns for at in turn.marks.values()), default=0.0):.3f}"
        )
        live = self.server.profiles.get(connection.session_id)
        profile = (
            {**live.choice.to_json(), "profile_pending": live.pending.name if live.pending else None}
            if live is not None
            else {"profile": None, "profile_source": None, "profile_pending": None}
        )
        version = (
            f"{len(state.history)}:{last.turn_id if last else 0}:{len(last.content) if last else 0}:"
            f"{log.count if log else 0}:{marks}:{activity}:{connection.mode}:{profile['profile']}:"
            f"{profile['profile_pending']}:{state.interruptions}:{state.echo_erle_db}"
        )
        return {
            "session_id": connection.session_id,
            "device_id": connection.device_id,
            "connected_at": connected_at,
            "mode": connection.mode,
            "state": activity,
            "turns": len({message.turn_id for message in state.history if message.role == "user"}),
            "tools": len(tools.tools) if tools is not None else 0,
            "tools_offered": self._tools_offered(),
            "interruptions": dict(state.interruptions),
            "echo_erle_db": state.echo_erle_db,
            **profile,
            "version": version,
        }

    @staticmethod
    def _activity(connection: XiaozhiConnection) -> str:
        """speaking, thinking (a turn started and has not answered yet), listening, or idle."""
        if connection.speaking:
            return "speaking"
        session = connection.session
        assert session is not None
        state = session.state
        if state.turns:
            latest = state.turns[-1]
            started = latest.marks.get("agent_start") or latest.marks.get("speech_end")
            answered = "first_frame_sent" in latest.marks or any(
                message.role == "assistant" and message.turn_id == latest.turn_id for message in state.history[-4:]
            )
            if started is not None and not answered and time.monotonic() - started < THINKING_LIMIT:
                return "thinking"
        return "listening" if connection.listening or connection.mode == "realtime" else "idle"

    def _connection(self, session_id: str) -> XiaozhiConnection:
        connection = self.server.transport.connections.get(session_id)
        if connection is None or connection.session is None:
            raise ConsoleError(f"no live session {session_id!r} on this server", 404)
        return connection

    # --- tools ---------------------------------------------------------------------------------

    def _session_tools(self, session_id: str) -> SessionTools:
        self._connection(session_id)
        tools = self.server.tools.get(session_id)
        if tools is None:
            raise ConsoleError(f"session {session_id!r} has no agent, so no tools", 409)
        return tools

    def _process(self) -> tuple[ToolSet, ToolExecutor]:
        """The tools every session starts with (local functions, process-wide MCP servers)."""
        if self._process_toolset is None or self._process_executor is None:
            policy = self.server.config.tools.policy() if self.server.config.agent is not None else ToolPolicy()
            self._process_toolset = ToolSet(policy, session_id="console")
            self._process_executor = ToolExecutor(self._process_toolset, session_id="console")
        toolset = self._process_toolset
        voice = self.server.voice
        toolset.set_tools("local", voice.local_tools)
        if voice.mcp is not None:
            for key, definitions in voice.mcp.process_tools().items():
                toolset.set_tools(key, definitions)
        return toolset, self._process_executor

    def _tools_offered(self) -> bool:
        """Whether the agent's model is offered the tools at all (a small model may get none)."""
        return self.server.voice.tool_support.offered

    async def tools(self, session_id: str | None) -> dict[str, Any]:
        toolset = self._session_tools(session_id).toolset if session_id else self._process()[0]
        return {"session_id": session_id, "tools": describe_tools(toolset), "tools_offered": self._tools_offered()}

    async def execute(self, session_id: str | None, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = tool.strip() if isinstance(tool, str) else ""
        if not tool or len(tool) > MAX_TOOL_NAME:
            raise ConsoleError(f"tool must be a name of 1 to {MAX_TOOL_NAME} characters")
        if not isinstance(arguments, dict):
            raise ConsoleError("arguments must be a JSON object")
        executor = self._session_tools(session_id).executor if session_id else self._process()[1]
        if executor.closed:
            raise ConsoleError("the session is closing", 409)
        request = ToolCallRequest(
            call_id=executor.new_call_id(CONSOLE_CALL_PREFIX), tool_name=tool, arguments=dict(arguments)
        )
        started = time.perf_counter()
        result = await executor.execute(request)
        entry = _call_entry(request, result, (time.perf_counter() - started) * 1000, cut=False)
        return {"session_id": session_id, **entry}

    # --- say -----------------------------------------------------------------------------------

    async def say(self, session_id: str, text: str) -> dict[str, Any]:
        text = text.strip() if isinstance(text, str) else ""
        if not text or len(text) > MAX_SAY_CHARS:
            raise ConsoleError(f"text must be 1 to {MAX_SAY_CHARS} characters")
        connection = self._connection(session_id)
        await connection.handle({"type": "listen", "state": "detect", "text": text})
        return {"session_id": session_id, "text": text, "wake_word": connection.is_wake_word(text)}

    # --- profiles ------------------------------------------------------------------------------

    async def reassign(self, device_id: str, profile: str | None) -> list[dict[str, Any]]:
        return self.server.reassign(device_id, profile)

    # --- memory --------------------------------------------------------------------------------

    async def memory_changed(self, device_id: str, what: str, conversation: str = "", seq: int = -1) -> int:
        followed = 0
        for memory in self.server.memories():  # one per profile in use
            try:
                followed += await memory.changed(str(device_id), str(what), str(conversation), int(seq))
            except ValueError as exc:
                raise ConsoleError(str(exc)) from None
        if what in ("forget", "history"):  # the Sessions pane shows the live words: they go too
            for connection in list(self.server.transport.connections.values()):
                if connection.device_id == device_id and connection.session is not None:
                    connection.session.state.history.clear()
        return followed


def describe_tools(toolset: ToolSet) -> list[dict[str, Any]]:
    """Every tool of a ToolSet, offered or turned off, with its policy state."""
    policy = toolset.policy
    offered = {(tool.source, tool.origin, tool.source_name): tool for tool in toolset.tools}
    described = []
    for key, tools in toolset.source_tools().items():
        for tool in tools:
            public = offered.get((tool.source, tool.origin, tool.source_name))
            shown = public or tool
            described.append(describe_tool(shown, policy, key=key, enabled=public is not None))
    return described


def describe_tool(tool: ToolDefinition, policy: ToolPolicy, *, key: str, enabled: bool) -> dict[str, Any]:
    parameters = tool.parameters if isinstance(tool.parameters, dict) else {}
    properties = parameters.get("properties")
    required = parameters.get("required")
    return {
        "name": tool.name,
        "original_name": tool.source_name,
        "source": tool.source,
        "source_key": key,
        "scope": "session" if key in SESSION_SOURCES else "process",
        "origin": tool.origin,
        "description": tool.description,
        "parameters": parameters,
        "parameter_count": len(properties) if isinstance(properties, dict) else 0,
        "required": list(required) if isinstance(required, list) else [],
        "enabled": enabled,
        "hidden": tool.hidden,
        "sub_type": policy.sub_type(tool),
        "async": policy.runs_async(tool),
        "timeout": policy.timeout_for(tool),
        "confirmation": policy.needs_confirmation(tool),
    }


def _call_entry(
    request: ToolCallRequest, result: ToolCallResult, elapsed_ms: float, *, cut: bool = True
) -> dict[str, Any]:
    def short(text: str | None) -> str | None:
        return text[:MAX_TEXT] + "…" if cut and text is not None and len(text) > MAX_TEXT else text

    return {
        "call_id": request.call_id,
        "tool": request.tool_name,
        "original_name": request.original_name,
        "source": request.source,
        "protocol": request.protocol,
        "arguments": _jsonable(request.arguments),
        "by": "console" if request.call_id.startswith(CONSOLE_CALL_PREFIX + "_") else "agent",
        "success": result.success,
        "status": result.status,
        "result": short(result.result),
        "error": short(result.error),
        "ms": round(elapsed_ms, 1),
        "at": round(time.time(), 3),
    }


def _jsonable(value: Any) -> Any:
    """`value` with anything JSON cannot hold turned into text."""
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
