"""TextToolAgentProvider: tools for models without native function calling (VCP or XML).

Wraps any `AgentProvider` (litellm, local llama): the tool definitions are rendered into its
system prompt by a `TextToolProtocol`; each reply streams out as it is written (the speech
filter downstream keeps the markup from being spoken); when the reply is complete its calls
are parsed, run by the session's `ToolExecutor` (the same policy, validation, confirmation
and timeouts as native calls), and the results go back to the model as the next user message,
until a reply has no calls or `max_iterations` rounds were made. The inner provider's history
keeps every reply in full, markup included, and every result message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import Any

from loguru import logger

from vixio.core.tools.converter import ToolConverterBase
from vixio.core.tools.executor import ToolExecutor
from vixio.core.tools.protocols.base import TextToolProtocol
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition
from vixio.providers.agent.base import AgentEvent, AgentProvider, AgentTextDelta, AgentToolCall, AgentToolResult
from vixio.providers.agent.instructions import SystemPrompt, render_prompt


class ToolDefinitionConverter(ToolConverterBase):
    """For text protocols the agent takes `ToolDefinition`s as they are."""

    def convert_device_tool(self, tool_def: ToolDefinition) -> ToolDefinition:
        return tool_def

    def convert_mcp_tool(self, tool_def: ToolDefinition) -> ToolDefinition:
        return tool_def

    def convert_local_tool(self, func: Any) -> ToolDefinition:
        if isinstance(func, ToolDefinition):
            return func
        from vixio.core.tools.local import func_to_tool_definition

        return func_to_tool_definition(func)


class TextToolAgentProvider(AgentProvider):
    def __init__(
        self,
        inner: AgentProvider,
        protocol: TextToolProtocol,
        executor: ToolExecutor,
        *,
        max_iterations: int = 5,
    ) -> None:
        self.inner = inner
        self.protocol = protocol
        self.executor = executor
        self.max_iterations = max_iterations
        self.max_history_messages = inner.max_history_messages
        self._system_prompt: SystemPrompt = ""
        self._tools: list[ToolDefinition] = []

    def _prompt(self) -> str:
        section = self.protocol.render_tools(self._tools) if self._tools else ""
        return "\n\n".join(part for part in (render_prompt(self._system_prompt), section) if part)

    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: SystemPrompt = "") -> None:
        self._system_prompt = system_prompt
        self._tools = [t for t in tools if isinstance(t, ToolDefinition)]
        await self.inner.initialize(tools=(), system_prompt=self._prompt)

    async def update_tools(self, tools: Sequence[Any]) -> None:
        """New tools are in the system prompt from the next model call (the history stays)."""
        self._tools = [t for t in tools if isinstance(t, ToolDefinition)]
        await self.inner.initialize(tools=(), system_prompt=self._prompt)
        logger.info("text-protocol ({}) tools updated: {}", self.protocol.name, len(self._tools))

    async def chat(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        message = text
        for iteration in range(self.max_iterations + 1):
            reply: list[str] = []
            async with contextlib.aclosing(self.inner.chat(message)) as events:
                async for event in events:
                    if isinstance(event, AgentTextDelta):
                        reply.append(event.text)
                    yield event
            requests = self.protocol.parse("".join(reply)) if self._tools else []
            if not requests:
                return
            if iteration == self.max_iterations:
                logger.warning("{} tool rounds this turn: further {} calls are not run", iteration, self.protocol.name)
                return
            # The model's request ids are unique within one reply only; the session's record
            # needs ids unique across turns, while the results must echo the model's own.
            runs = [
                replace(r, call_id=self.executor.new_call_id(self.protocol.name), errors=list(r.errors))
                for r in requests
            ]
            for run in runs:
                yield AgentToolCall(run.call_id, run.tool_name, json.dumps(run.arguments, ensure_ascii=False))
            results = await self._run(runs)
            for run, result in zip(runs, results, strict=True):
                yield AgentToolResult(run.call_id, run.tool_name, result.text)
            message = self.protocol.format_results(list(zip(requests, results, strict=True)))

    async def _run(self, requests: list[ToolCallRequest]) -> list[ToolCallResult]:
        # The executor serialises the calls itself when the policy turns parallelism off.
        return list(await asyncio.gather(*(self.executor.execute(r) for r in requests)))

    async def cancel(self) -> None:
        await self.inner.cancel()

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.inner.history

    def record_interrupted_reply(self, heard_text: str) -> None:
        self.inner.record_interrupted_reply(heard_text)

    def clear_history(self) -> None:
        self.inner.clear_history()

    def restore_history(self, items: Sequence[dict[str, Any]]) -> None:
        self.inner.restore_history(items)
