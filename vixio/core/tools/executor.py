"""ToolExecutor: the one place a tool call runs, whatever front end produced it.

For each `ToolCallRequest` it resolves the tool, refuses what the policy does not offer,
reports parse errors back, coerces and validates the arguments, asks for confirmation when the
policy wants it, then runs the tool:

- control tools (docs/tool-systems.md §3) start and are answered "success" at once; their outcome is logged;
- async tools (docs/tool-systems.md §6) are handed to the background task runner and answered with a task
  handle;
- query tools are awaited up to the policy timeout, one at a time when `parallel` is off.

While a preemptive turn is held (`hold()` until `release()`), a call the policy does not let run
before the turn is confirmed (`ToolPolicy.runs_before_confirmation`: control, async, device and
companion tools unless read-only) waits; it runs when the turn is confirmed and is refused when
the attempt is cancelled (its run is being cancelled too).

Every outcome is a `ToolCallResult` whose text the model can act on; nothing raises into the
agent loop except cancellation. A call that cannot run (no such tool, unreadable or invalid
arguments) is the model's or the peer's mistake: a WARNING, throttled per session (the first few,
then a count every ten seconds), where a call that ran is one INFO line.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.core.tools.arguments import ArgumentError, parse_arguments, prepare_arguments
from vixio.core.tools.context import Say, ToolCallContext, ToolContext, confirmation_key, current_tool_context
from vixio.core.tools.toolset import ToolSet
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition

CONTROL_RESULT = "success"
"""What the model is told for a control call: the device is not waited for (docs/tool-systems.md §3)."""

_call_numbers = itertools.count(1)

SPEAKER_REFUSAL = {
    "en": "Sorry, I only do that for a voice I know. Enrol your voice first.",
    "zh": "抱歉，这件事我只为认识的声音做。请先录入你的声音。",
}
"""Spoken to a voice that is not enrolled when the model calls a `require_speaker` tool."""

CallObserver = Callable[[ToolCallRequest, ToolCallResult, float], None]
"""Called with each finished call, its result and how long it took (ms)."""


class _CallRefused(Exception):
    """The call cannot run; `message` is what the model is told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Confirmation:
    """Whether a held preemptive turn was confirmed, once decided."""

    def __init__(self) -> None:
        self.decided = asyncio.Event()
        self.confirmed = False


class AsyncToolRunner(Protocol):
    """Runs async tools in the background (vixio.core.tools.tasks)."""

    def submit(self, tool: ToolDefinition, request: ToolCallRequest) -> ToolCallResult: ...


class ToolExecutor:
    def __init__(
        self,
        toolset: ToolSet,
        context: ToolCallContext | None = None,
        *,
        async_runner: AsyncToolRunner | None = None,
        session_id: str = "",
    ) -> None:
        self.toolset = toolset
        self.context = context or ToolCallContext()
        self.async_runner = async_runner
        self._serial = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.closed = False
        self.observers: list[CallObserver] = []
        """Told of every finished call (the operator console's conversation view); must not block."""
        self.session_id = session_id
        self.device_id = ""
        """The session's device, handed to tools that take a `ToolContext`."""
        self.speaker: Say | None = None
        """Speaks to the user (`ToolContext.say`); the app layer sets it when there is a voice."""
        self.person: Callable[[], str] = lambda: ""
        """Who is speaking this turn: an enrolled name, "" for an unknown voice (`require_speaker`)."""
        self.speaker_refusal = SPEAKER_REFUSAL["en"]
        """What an unknown voice hears when it asks for a `require_speaker` tool."""
        self._logger = logger.bind(session=session_id or "-", component="tools")
        self._refusals = LogThrottle()
        self._held: _Confirmation | None = None

    def hold(self) -> None:
        """A preemptive turn starts: calls with side effects wait for `release`."""
        self.release(confirmed=False)
        self._held = _Confirmation()

    def release(self, *, confirmed: bool) -> None:
        """The held turn was confirmed (waiting calls run) or cancelled (they are refused)."""
        held, self._held = self._held, None
        if held is not None:
            held.confirmed = confirmed
            held.decided.set()

    def new_call_id(self, prefix: str = "call") -> str:
        return f"{prefix}_{next(_call_numbers)}"

    async def execute(self, request: ToolCallRequest) -> ToolCallResult:
        """Run one call; the result's `call_id` is the request's."""
        if not request.call_id:
            request.call_id = self.new_call_id()
        self.context.record_call(request)
        started = time.perf_counter()
        # Tasks the call starts (control, async) copy this, so they see the same caller.
        token = current_tool_context.set(
            ToolContext(
                session_id=self.session_id,
                device_id=self.device_id,
                call_id=request.call_id,
                tool_name=request.tool_name,
                calls=self.context,
                speaker=self.speaker,
                person=self.person(),
            )
        )
        refused = False
        try:
            result = await self._execute(request)
        except _CallRefused as exc:
            result, refused = ToolCallResult.fail(exc.message), True
        finally:
            current_tool_context.reset(token)
        result.call_id = request.call_id
        result.duration_ms = (time.perf_counter() - started) * 1000
        self.context.record_result(result)
        if refused:
            self._log_refusal(request, result)
        else:
            self._logger.info(
                "tool {} ({}) -> {} in {:.1f} ms: {}",
                request.tool_name,
                request.original_name or "?",
                result.status if result.success else "error",
                result.duration_ms,
                _short(result.text),
            )
        for observer in list(self.observers):
            try:
                observer(request, result, result.duration_ms)
            except Exception:  # an observer's bug must not change the call's outcome
                self._logger.exception("tool call observer failed")
        return result

    async def _execute(self, request: ToolCallRequest) -> ToolCallResult:
        tool = self.toolset.resolve(request.tool_name)
        if request.errors:
            what = f"the call to {tool.name}" if tool else f"the {request.protocol} tool call"
            raise _CallRefused(f"{what} could not be read: " + "; ".join(request.errors))
        if tool is None:
            raise _CallRefused(self._unknown(request.tool_name))
        request.source, request.original_name = tool.source, tool.source_name
        try:
            # Native calls carry JSON text; text protocols parse their own arguments (raw is the block).
            native_json = request.protocol == "native" and not request.arguments and request.raw
            arguments = parse_arguments(request.raw) if native_json else request.arguments
            arguments = prepare_arguments(arguments, tool.parameters)
        except ArgumentError as exc:
            raise _CallRefused(f"{tool.name}: {exc}") from None
        request.arguments = arguments
        policy = self.toolset.policy
        held = self._held
        if held is not None and not policy.runs_before_confirmation(tool):
            self._logger.info("tool {} waits until the user's turn is confirmed", tool.name)
            await held.decided.wait()
            if not held.confirmed:
                raise _CallRefused(f"{tool.name} was not run: the user was still speaking")
        if policy.needs_speaker(tool) and not self.person():
            if self.speaker is not None:
                await self.speaker(self.speaker_refusal)
            raise _CallRefused(
                f"{tool.name} was not run: only an enrolled voice may use it and this voice was not "
                "recognised. The user has been told so; do not try again or another way."
            )
        if policy.needs_confirmation(tool):
            key = confirmation_key(tool.name, arguments)
            if not self.context.take_approval(key):
                self.context.ask_confirmation(key)
                return ToolCallResult(
                    success=True,
                    status="pending",
                    result=(
                        f"Not run yet: {tool.name} needs the user's confirmation. Ask the user whether to go ahead "
                        "(say what it will do), and call it again with the same arguments only if they say yes."
                    ),
                )
        if policy.runs_async(tool) and self.async_runner is not None:
            return self.async_runner.submit(tool, request)
        if policy.sub_type(tool) == "control":
            self._start_control(tool, request, arguments)
            return ToolCallResult.ok(CONTROL_RESULT)
        return await self._run_query(tool, arguments, policy.timeout_for(tool))

    async def _run_query(self, tool: ToolDefinition, arguments: dict[str, Any], timeout: float) -> ToolCallResult:
        if self.toolset.policy.parallel:
            return await self._invoke(tool, arguments, timeout)
        async with self._serial:
            return await self._invoke(tool, arguments, timeout)

    async def _invoke(self, tool: ToolDefinition, arguments: dict[str, Any], timeout: float) -> ToolCallResult:
        try:
            async with asyncio.timeout(timeout):
                return await tool.invoke(arguments)
        except TimeoutError:
            return ToolCallResult.fail(f"{tool.name} did not answer within {timeout:g} s")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's bug is the model's information, not a dead turn
            self._logger.opt(exception=exc).warning("tool {} raised", tool.name)
            return ToolCallResult.fail(f"{tool.name} failed: {type(exc).__name__}: {exc}")

    def _start_control(self, tool: ToolDefinition, request: ToolCallRequest, arguments: dict[str, Any]) -> None:
        async def run() -> None:
            result = await self._invoke(tool, arguments, self.toolset.policy.timeout_for(tool))
            if not result.success:
                self._logger.warning("control tool {} failed after it was answered: {}", tool.name, result.error)

        task = asyncio.create_task(run(), name=f"vixio-tool-{request.call_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _unknown(self, name: str) -> str:
        known = self.toolset.find_any(name)
        if known is not None:
            return f"the tool {name} is turned off on this server"
        offered = ", ".join(tool.name for tool in self.toolset.tools) or "none"
        return f"there is no tool named {name}; available tools: {offered}"

    def _log_refusal(self, request: ToolCallRequest, result: ToolCallResult) -> None:
        count = self._refusals.hit()
        if count == 0:
            self._logger.warning(
                "tool call {} refused (the model was told): {}", _short(request.tool_name, 60), _short(result.text)
            )
        elif count:
            self._logger.warning(
                "{} more tool call(s) refused in the last {:g} s (the model was told each); latest: {}: {}",
                count,
                self._refusals.every,
                _short(request.tool_name, 60),
                _short(result.text),
            )

    def on_user_text(self, text: str) -> None:
        """Called with each user turn's text (confirmations)."""
        self.context.on_user_text(text, approved=self.toolset.policy.confirms(text))

    def add_closer(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run `closer` when the session's tools close (async tasks, session MCP servers...)."""
        self._closers.append(closer)

    async def close(self) -> None:
        """The session is ending: cancel control calls still running, then run the closers."""
        if self.closed:
            return
        self.closed = True
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        for closer in reversed(self._closers):
            try:
                await closer()
            except Exception:
                self._logger.exception("closing the session's tools failed")


def _short(text: str, limit: int = 120) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
