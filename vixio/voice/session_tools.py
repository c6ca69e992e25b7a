"""One session's tools, wired together (application layer, like `vixio.voice.stack`).

    ToolSet (local + device + registerTools + MCP servers, named and filtered by policy)
      → ToolExecutor (the one place calls run)
      → a converter (openai-agents FunctionTools, or definitions for a text protocol)
      → AgentStation.update_tools (hot swap, also mid-turn)

The transport reports the device's tools (`on_device_tools`) when tools/list completes or a
registerTools client registers, and again when they change; the agent sees them from its next
model call. Everything a session started (control calls, async tasks, session-scoped MCP
servers) stops when the session closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from loguru import logger

from vixio.core.cooperative import map_in_slices
from vixio.core.tools.context import ToolCallContext
from vixio.core.tools.converter import ToolConverterBase
from vixio.core.tools.executor import AsyncToolRunner, ToolExecutor
from vixio.core.tools.policy import ToolPolicy
from vixio.core.tools.tasks import SessionTaskRunner
from vixio.core.tools.toolset import ToolSet
from vixio.core.tools.types import ToolDefinition, ToolList

Closer = Callable[[], Awaitable[None]]


class SessionTools:
    def __init__(self, session_id: str, policy: ToolPolicy, *, local: Sequence[ToolDefinition] = ()) -> None:
        self.session_id = session_id
        self.toolset = ToolSet(policy, session_id=session_id)
        self.context = ToolCallContext()
        self.executor = ToolExecutor(self.toolset, self.context, session_id=session_id)
        self.toolset.set_tools("local", local)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._logger = logger.bind(session=session_id, component="tools")
        self.executor.add_closer(self._shutdown)
        self._device_tools_known: asyncio.Event | None = None
        self._agent: tuple[ToolConverterBase, bool] | None = None
        """The agent's converter and whether its model is offered the tools (`bind_agent`)."""

    @property
    def tools(self) -> list[ToolDefinition]:
        return self.toolset.tools

    def set_async_runner(self, runner: AsyncToolRunner) -> None:
        self.executor.async_runner = runner

    def add_source(self, key: str, tools: Sequence[ToolDefinition]) -> None:
        """Add tools before the agent starts (no listeners called)."""
        self.toolset.set_tools(key, tools)

    @property
    def closed(self) -> bool:
        return self.executor.closed

    async def update_source(self, key: str, tools: Sequence[ToolDefinition] | None) -> None:
        if self.closed:
            return
        public = await self.toolset.update(key, tools)
        self._logger.info("tools from {}: {} ({})", key, len(tools or ()), self.offered_summary(len(public)))

    def offered_summary(self, public: int) -> str:
        """How many tools the model is offered: none when its agent is bound without tools (a model
        that cannot call them), however many the policy lets through."""
        if self._agent is not None and not self._agent[1]:
            return f"the model is offered none; {public} callable from the console"
        return f"{public} offered in all"

    def expect_device_tools(self) -> None:
        """The device announced MCP: its tool list is on its way (see `wait_for_device_tools`)."""
        if self._device_tools_known is None:
            self._device_tools_known = asyncio.Event()

    async def wait_for_device_tools(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until the expected device tools are known; at once when
        none are expected or they arrived. A turn asked right after hello needs them."""
        known = self._device_tools_known
        if known is None or known.is_set():
            return
        try:
            await asyncio.wait_for(known.wait(), timeout)
        except TimeoutError:
            self._logger.warning("the device's tool list did not arrive within {:g} s; answering without it", timeout)
            known.set()  # one wait per session is enough
        else:
            self._logger.info("the first turn waited for the device's tool list")

    async def on_device_tools(self, tools: list[Any]) -> None:
        """Transport callback: the device's tools (MCP, or registerTools) are known or changed.

        Each tool says its source; an empty list clears the one device-side source this session
        has tools from (with tools from both, it is ambiguous and ignored with a warning).
        """
        try:
            await self._apply_device_tools(tools)
        finally:
            if self._device_tools_known is not None:
                self._device_tools_known.set()

    async def _apply_device_tools(self, tools: list[Any]) -> None:
        definitions = [tool for tool in tools if isinstance(tool, ToolDefinition)]
        if not definitions and isinstance(tools, ToolList):  # says which source it empties
            await self.update_source(tools.source, [])
            return
        if not definitions:
            held = [key for key, count in self.toolset.sources().items() if key in ("device", "register") and count]
            if len(held) > 1:
                self._logger.warning("an empty device tool list with both MCP and registerTools tools: ignored")
                return
            for key in held:
                await self.update_source(key, [])
            return
        for source in dict.fromkeys(tool.source for tool in definitions):
            await self.update_source(source, [tool for tool in definitions if tool.source == source])

    def bind_agent(
        self, converter: ToolConverterBase, update: Callable[[Sequence[Any]], Awaitable[None]], *, offered: bool = True
    ) -> list[Any]:
        """Keep an agent's tool list in sync; returns its first list (empty when the model is not
        `offered` tools: they stay the console's and the policy's)."""
        self._agent = (converter, offered)

        async def on_change(tools: list[ToolDefinition]) -> None:
            bound = self._agent  # the latest bind's or rebind's converter
            if bound is not None and bound[1]:
                # In slices: hundreds of tools from one device must not hold up every other session.
                await update(await map_in_slices(bound[0].convert, tools))

        self.toolset.add_listener(on_change)
        return converter.convert_all(self.toolset.tools) if offered else []

    def rebind_agent(self, converter: ToolConverterBase, *, offered: bool) -> list[Any]:
        """Another agent provider (a profile switch): its converter from now on; returns its list."""
        self._agent = (converter, offered)
        return converter.convert_all(self.toolset.tools) if offered else []

    async def set_policy(self, policy: ToolPolicy) -> None:
        """Another tool policy (a profile switch): the agent is told the tools it now offers."""
        self.toolset.policy = policy
        await self.toolset.republish()
        runner = self.executor.async_runner
        if isinstance(runner, SessionTaskRunner):
            runner.tool_timeout = policy.configured_timeout

    def start_background(self, coro: Awaitable[Any], name: str) -> None:
        """Run setup work (e.g. connecting session-scoped MCP servers) without holding the session up."""
        task = asyncio.ensure_future(coro)
        task.set_name(f"vixio-{self.session_id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._logger.opt(exception=task.exception()).error("tool setup task {} failed", task.get_name())

    def add_closer(self, closer: Closer) -> None:
        """Run `closer` when the session's tools close."""
        self.executor.add_closer(closer)

    async def close(self) -> None:
        """Stop everything of this session: setup tasks, control calls, async tasks, MCP servers.
        The AgentStation does this when its pipeline stops."""
        await self.executor.close()

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.toolset.clear()
