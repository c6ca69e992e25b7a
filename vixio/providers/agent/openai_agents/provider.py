"""`AgentProvider` on an openai-agents `Agent`, streamed with `Runner.run_streamed`.

The model is any openai-agents `Model`; given a name, it is a `LitellmModel`, so one provider
serves OpenAI, DeepSeek, Qwen, a local OpenAI-compatible server... (`"openai/gpt-4o-mini"`,
`"deepseek/deepseek-chat"`, `api_base=...`).

History is the run's input list (`result.to_input_list()`), kept between turns and trimmed at
turn boundaries. A failed run is an `AgentError` worded by `run_failure`. Tracing is off unless
`tracing=True`: openai-agents would otherwise upload traces whenever `OPENAI_API_KEY` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import os
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from agents import (
    Agent,
    Model,
    ModelSettings,
    RunConfig,
    Runner,
    RunResultStreaming,
    ToolErrorFormatterArgs,
    TResponseInputItem,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from agents.stream_events import (
    RawResponsesStreamEvent,
    RunItemStreamEvent,
    StreamEvent,
)
from loguru import logger

from vixio.core.log_throttle import LogThrottle
from vixio.patches import httpcore as httpcore_patches
from vixio.patches import openai_agents as agents_patches
from vixio.patches import openai_sdk as sdk_patches
from vixio.providers.agent.base import (
    AgentError,
    AgentEvent,
    AgentProvider,
    AgentTextDelta,
    AgentTextEnd,
    AgentToolCall,
    AgentToolResult,
)
from vixio.providers.agent.instructions import SystemPrompt
from vixio.providers.agent.openai_agents.clients import shared_openai_client, warm_openai_client
from vixio.providers.agent.openai_agents.history import (
    Item,
    drop_unpaired_tool_items,
    replace_last_reply,
    trim_history,
)
from vixio.providers.agent.openai_agents.model_deadline import within_model_deadline
from vixio.providers.agent.openai_agents.run_failure import RunFailureContext, describe_run_failure

# Off for the whole process by default; a provider built with tracing=True turns it back on
# (process-wide in openai-agents) and every other provider still opts out per run.
set_tracing_disabled(True)

_LITELLM_MODULE = "agents.extensions.models.litellm_model"
_OPENAI_PREFIX = "openai/"
CANCEL_GRACE_SECONDS = 1.0
"""How long `cancel()` waits for the run task to unwind (close its HTTP stream)."""


@dataclass
class _Turn:
    """One running `chat()`: what has streamed so far, to build history if it is cut off."""

    result: RunResultStreaming
    agent: Agent[Any]
    start: list[Item]
    """History before the turn plus the user's message."""
    items: list[Item] = field(default_factory=list)
    """Completed run items (messages, tool calls, tool outputs) as input items."""
    streamed_text: str = ""
    tool_names: dict[str, str] = field(default_factory=dict)
    done: bool = False
    max_tool_rounds: int | None = None
    tool_rounds: int = 0
    """Model calls of this turn that asked for tools."""
    round_counted: bool = False
    tools_exhausted: bool = False
    started: bool = False
    """The model's answer began streaming (a failure now is mid-reply, not "could not reach")."""

    def translate(self, event: StreamEvent) -> AgentEvent | None:
        """The vixio event for an openai-agents stream event (None for the many it ignores)."""
        if isinstance(event, RawResponsesStreamEvent):
            self.started = True
            if event.data.type == "response.created":
                self.round_counted = False
            if event.data.type == "response.output_text.delta" and event.data.delta:
                self.streamed_text += event.data.delta
                return AgentTextDelta(event.data.delta)
            if event.data.type == "response.completed":
                return AgentTextEnd()
            return None
        if not isinstance(event, RunItemStreamEvent):
            return None
        item = event.item
        if isinstance(item, MessageOutputItem | ToolCallItem | ToolCallOutputItem):
            self.items.append(dict(item.to_input_item()))
        if isinstance(item, ToolCallItem) and not self.round_counted:
            self.round_counted = True
            self.tool_rounds += 1
            if self.max_tool_rounds is not None and self.tool_rounds >= self.max_tool_rounds:
                # openai-agents reads agent.tools at every model call: the next one must answer.
                self.agent.tools = []
                self.tools_exhausted = True
                logger.info("{} tool round(s) this turn: the model answers without tools now", self.tool_rounds)
        if isinstance(item, ToolCallItem) and _field(item.raw_item, "type") == "function_call":
            call_id, name = str(_field(item.raw_item, "call_id")), str(_field(item.raw_item, "name"))
            self.tool_names[call_id] = name
            return AgentToolCall(call_id, name, str(_field(item.raw_item, "arguments") or ""))
        if isinstance(item, ToolCallOutputItem):
            call_id = str(_field(item.raw_item, "call_id"))
            return AgentToolResult(call_id, self.tool_names.get(call_id, ""), str(item.output))
        return None

    def interrupted_history(self) -> list[Item]:
        """History for a turn cut off now: finished tool pairs kept, the reply marked."""
        kept = [*self.start, *drop_unpaired_tool_items(self.items)]
        return replace_last_reply(kept, self.streamed_text) or kept


def _direct_openai_model(name: str, api_base: str | None, api_key: str | None, timeout: float | None) -> Model:
    """openai-agents' Chat Completions model on the event loop's shared AsyncOpenAI client for
    this server (its connection pool serves every session of the loop: `openai_clients`)."""
    from agents import OpenAIChatCompletionsModel

    client = shared_openai_client(api_base, api_key, timeout)
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


def with_tools(agent: Agent[Any], tools: list[Any]) -> Agent[Any]:
    """`agent.clone(tools=tools)` without re-validating the agent: `clone` is a shallow
    `dataclasses.replace`, and its `__post_init__` checks every field again (resolving the
    settings' type hints, deep-copying the default settings): ~80 µs a turn on a 2-core EPYC VM,
    against ~4 µs for this copy of an agent that was valid when built."""
    run_agent = copy.copy(agent)
    run_agent.tools = tools
    return run_agent


def _field(raw: Any, name: str) -> Any:
    """Read a field of a raw item, which is a pydantic model or a TypedDict."""
    return raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)


class OpenAIAgentProvider(AgentProvider):
    """An openai-agents agent for one session.

    Args:
        model: a litellm model name (`"openai/gpt-4o-mini"`) or an openai-agents `Model`.
        api_base: base URL of an OpenAI-compatible server (litellm models only).
        api_key: None lets litellm read the provider's environment variable.
        max_turns: model calls allowed per user turn (each tool round costs one).
        max_tool_iterations: tool rounds allowed per user turn; after the last one the model
            gets no tools and has to answer (max_turns becomes this + 2).
        tracing: upload openai-agents traces (needs `OPENAI_API_KEY`).
        timeout: seconds one model call may take, streaming included.
        max_retries: litellm retries of a failed request; 0 fails fast so the user hears an
            apology instead of silence.
        openai_direct: models named `openai/...` (OpenAI, or any OpenAI-compatible server at
            `api_base`) are called with the openai SDK directly, as litellm itself does for
            them, without litellm's per-chunk stream wrapping (the largest share of a turn's
            CPU) and without importing litellm (~140 MB); False sends them through litellm too.
        missing_key: names the API key that is not set ("agent.api_key is empty (DEEPSEEK_API_KEY
            unset)"), for the failure messages.
    """

    def __init__(
        self,
        model: str | Model,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        max_turns: int = 8,
        max_tool_iterations: int | None = None,
        tracing: bool = False,
        timeout: float | None = 30.0,
        max_retries: int = 0,
        max_history_messages: int = 40,
        name: str = "vixio",
        openai_direct: bool = True,
        missing_key: str | None = None,
    ) -> None:
        self._model_spec = model
        self._api_base = api_base
        self._api_key = api_key
        self._max_tool_iterations = max_tool_iterations
        self._max_turns = max_turns if max_tool_iterations is None else max_tool_iterations + 2
        self._timeout = timeout
        self._name = name
        self._missing_key = missing_key
        self.max_history_messages = max_history_messages
        retries = {"num_retries": max_retries, "max_retries": max_retries}
        self._direct = isinstance(model, str) and openai_direct and model.startswith(_OPENAI_PREFIX)
        """`openai/...` on the openai SDK (`_direct_openai_model`), not through litellm."""
        through_litellm = isinstance(model, str) and not self._direct
        extra_args = retries if through_litellm else None  # litellm's knobs
        # No SDK `timeout`: `within_model_deadline` enforces it (see there why).
        self._settings = ModelSettings(temperature=temperature, max_tokens=max_tokens, extra_args=extra_args)
        if tracing:
            logger.warning("openai-agents tracing enabled; this turns tracing on for the whole process")
            set_tracing_disabled(False)
        # A model that calls a tool that does not exist is told so (and what exists) and answers,
        # instead of the whole turn failing.
        self._run_config = RunConfig(
            tracing_disabled=not tracing,
            workflow_name=f"{name} turn",
            tool_not_found_behavior="return_error_to_model",
            tool_error_formatter=self._tool_error_message,
        )
        self._agent: Agent[Any] | None = None
        self.answer_first: Callable[[str], str | None] | None = None
        """Given the user's text, an answer to give without running the model, or None (e.g.
        `no_tools_guard.NoToolsGuard` for a model offered no tools). The turn is kept in history."""
        self._tools: list[Any] = []
        self._history: list[Item] = []
        self._turn: _Turn | None = None
        self._unknown_calls = LogThrottle()

    @property
    def where(self) -> str:
        """The model's address for messages: the API base or the model name."""
        if self._api_base:
            return self._api_base
        spec = self._model_spec
        return spec if isinstance(spec, str) else type(spec).__name__

    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: SystemPrompt = "") -> None:
        """Build the agent; a litellm model name is resolved here (importing litellm takes ~3 s,
        done off the event loop)."""
        model = self._model_spec
        if isinstance(model, str) and self._direct:
            model = _direct_openai_model(model[len(_OPENAI_PREFIX) :], self._api_base, self._api_key, self._timeout)
        elif isinstance(model, str):
            # litellm fetches a price list at import unless told not to; vixio runs offline.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            module = await asyncio.to_thread(importlib.import_module, _LITELLM_MODULE)
            litellm: Any = importlib.import_module("litellm")  # flags set by name, not in a stub
            litellm.suppress_debug_info = True  # no "Give Feedback" banners
            # litellm's aiohttp transport ends a stream whose connection broke as if it were
            # complete (the cut-off sentence would be spoken as the answer); httpx raises.
            litellm.disable_aiohttp_transport = True
            model = module.LitellmModel(model=model, base_url=self._api_base, api_key=self._api_key)
        # Loop time per turn otherwise: ~10-30 ms (request transform), a few µs per pooled
        # connection and two loop iterations (httpcore), 15 loop iterations and ~1 ms (the run's
        # gathers, copies and identity map); docs/patches.md measures all of it together.
        sdk_patches.install()
        httpcore_patches.install()
        agents_patches.install()
        self._tools = list(tools)
        instructions: Any = system_prompt or None
        if callable(system_prompt):  # rendered at every model call (e.g. the current time)
            render = system_prompt
            instructions = lambda _context, _agent: render()  # noqa: E731 - openai-agents' two-argument form
        self._agent = Agent(name=self._name, instructions=instructions, model=model, model_settings=self._settings)
        logger.debug("agent ready: model {}, {} tool(s)", self.where, len(self._tools))

    async def warm(self) -> None:
        """An `openai/...` model's shared pool is warmed for its chat endpoint (litellm keeps its
        own pool, out of reach)."""
        if self._direct:
            await warm_openai_client(self._api_base, self._api_key, self._timeout)

    async def update_tools(self, tools: Sequence[Any]) -> None:
        """Replace the tool list; a running turn sees it from its next model call."""
        before = len(self._tools)
        self._tools = list(tools)
        turn = self._turn
        if turn is not None and not turn.tools_exhausted:
            # openai-agents re-reads `agent.tools` at every model call of a run.
            turn.agent.tools = list(self._tools)
        logger.info("agent tools updated: {} -> {}", before, len(self._tools))

    async def chat(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        """Run one user turn (see `AgentProvider.chat`)."""
        if self._agent is None:
            raise AgentError("the agent is not initialized: call initialize() first")
        if self._turn is not None:
            await self.cancel()
        start = [*self._history, {"role": "user", "content": text}]
        if self.answer_first is not None and (answer := self.answer_first(text)) is not None:
            self._history = trim_history([*start, {"role": "assistant", "content": answer}], self.max_history_messages)
            yield AgentTextDelta(answer)
            yield AgentTextEnd()
            return
        # A per-turn copy owns its tool list, so update_tools never races another run's list.
        agent = with_tools(self._agent, list(self._tools))
        # The SDK's input items are TypedDicts: at run time the same dicts the history holds.
        items = cast("list[TResponseInputItem]", start)
        result = Runner.run_streamed(agent, items, max_turns=self._max_turns, run_config=self._run_config)
        turn = self._turn = _Turn(result=result, agent=agent, start=start, max_tool_rounds=self._max_tool_iterations)
        outcome = "interrupted"
        events = result.stream_events()
        try:
            async for event in within_model_deadline(events, self._timeout):
                translated = turn.translate(event)
                if translated is not None:
                    yield translated
            if result.run_loop_exception is not None:
                raise result.run_loop_exception
            outcome = "completed"
        except Exception as exc:
            outcome = "failed"
            failure = RunFailureContext(self.where, self._api_base, self._timeout, self._max_turns, self._missing_key)
            message = describe_run_failure(exc, failure, mid_reply=turn.started)
            logger.debug("agent turn failed, history left as before it: {}", message)
            raise AgentError(message) from exc
        finally:
            self._end_turn(turn, outcome)
            with contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]  # an async generator the SDK annotates as AsyncIterator

    def _end_turn(self, turn: _Turn, outcome: str) -> None:
        """Settle history once per turn: completed, interrupted (cancel/aclose) or failed."""
        if turn.done:
            return
        turn.done = True
        if self._turn is turn:
            self._turn = None
        if outcome == "completed":
            self._history = trim_history(cast("list[Item]", turn.result.to_input_list()), self.max_history_messages)
            return
        turn.result.cancel(mode="immediate")
        if outcome == "interrupted":
            self._history = trim_history(turn.interrupted_history(), self.max_history_messages)
            logger.debug("agent turn interrupted after {} chars", len(turn.streamed_text))

    async def cancel(self) -> None:
        """Stop the running turn and wait (briefly) for its run task to unwind."""
        turn = self._turn
        if turn is None:
            return
        self._end_turn(turn, "interrupted")
        task = turn.result.run_loop_task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)

    def _tool_error_message(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        """What the model is told when it called a tool that does not exist (None: the SDK's text)."""
        if args.kind != "tool_not_found":
            return None
        turn = self._turn
        tools = turn.agent.tools if turn is not None else self._tools
        names = sorted(str(getattr(tool, "name", "")) for tool in tools if getattr(tool, "name", ""))
        count = self._unknown_calls.hit()
        if count is not None:
            logger.warning(
                "the model called {!r}, which is not one of its {} tool(s); told it so{}",
                args.tool_name[:60],
                len(names),
                f" ({count} such calls since the last line)" if count else "",
            )
        available = ", ".join(names) if names else "none"
        return (
            f"Error: there is no tool named '{args.tool_name}'. Available tools: {available}. "
            "Use one of them or answer without a tool."
        )

    @property
    def history(self) -> list[dict[str, Any]]:
        """A copy of the input items the next turn sends."""
        return [dict(item) for item in self._history]

    def record_interrupted_reply(self, heard_text: str) -> None:
        """Keep only what the user heard of the last reply (see `AgentProvider`)."""
        replaced = replace_last_reply(self._history, heard_text)
        if replaced is None:
            logger.warning("no user turn in history to attach an interrupted reply to")
            return
        self._history = replaced

    def clear_history(self) -> None:
        """Forget the conversation."""
        self._history = []

    def restore_history(self, items: Sequence[dict[str, Any]]) -> None:
        """Continue an earlier conversation (see `AgentProvider`)."""
        self._history = trim_history(
            drop_unpaired_tool_items([dict(item) for item in items]), self.max_history_messages
        )
