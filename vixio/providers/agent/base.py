"""The agent provider contract: one user turn in, a stream of text and tool events out.

Framework-agnostic on purpose: nothing here imports an agent framework, so stations and the
app layer depend on this file only. A provider instance serves one session (it owns that
session's conversation history); the models behind it are shared per process.

    await agent.initialize(tools=local_tools, system_prompt="You are a helpful assistant.")
    async for event in agent.chat("turn the volume up"):
        match event:
            case AgentTextDelta(text=text): ...          # speak it
            case AgentToolCall(name=name): ...           # show "working..."
            case AgentToolResult(output=output): ...
    await agent.update_tools([*local_tools, *device_tools])   # device tools arrived later
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

INTERRUPTED_MARK = "[interrupted by the user]"
"""Appended to an assistant reply that was cut off, so the model knows the user heard only
the text before it (and does not assume its whole previous answer was delivered)."""


def mark_interrupted(heard_text: str) -> str:
    """The history text of a reply of which the user heard only `heard_text`."""
    heard = heard_text.strip()
    return f"{heard}… {INTERRUPTED_MARK}" if heard else INTERRUPTED_MARK


@dataclass(slots=True)
class AgentTextDelta:
    """A piece of the assistant's reply text, in order; concatenate to get the reply."""

    text: str


@dataclass(slots=True)
class AgentTextEnd:
    """One model call's text is complete (more may follow after tool calls).

    Lets the speech side say the last sentence now instead of after the run's bookkeeping."""


@dataclass(slots=True)
class AgentToolCall:
    """The model asked for a tool; the provider runs it and then yields `AgentToolResult`."""

    call_id: str
    """Correlates the call with its `AgentToolResult`."""
    name: str
    arguments: str
    """The arguments exactly as the model produced them: raw JSON text, possibly invalid."""


@dataclass(slots=True)
class AgentToolResult:
    """What a tool returned (or the error text the model was shown instead)."""

    call_id: str
    name: str
    output: str


AgentEvent: TypeAlias = AgentTextDelta | AgentTextEnd | AgentToolCall | AgentToolResult


class AgentError(Exception):
    """A turn failed (service unreachable, HTTP error, timeout, too many tool rounds).

    `str(error)` is a short sentence fit for a log line or an apology; the original exception
    is the `__cause__`.
    """


class AgentProvider(ABC):
    """One conversation with a language model agent; one instance per session.

    Turns are sequential: `chat` while a turn is still running cancels that turn first.
    """

    max_history_messages: int = 40
    """Upper bound on `history` items kept between turns. Oldest whole turns are dropped
    first; a tool call is never separated from its output. Instances may override it."""

    @abstractmethod
    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: str | Callable[[], str] = "") -> None:
        """Prepare the agent with its first tools (framework-specific objects) and prompt.

        A callable `system_prompt` is called at every model call (it carries the current time:
        `vixio.providers.agent.instructions.TurnInstructions`)."""

    async def warm(self) -> None:
        """Open a connection to a remote model now if its pool went cold (providers/prewarm.py),
        so the next turn does not wait for one; local models need nothing."""

    @abstractmethod
    def chat(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        """Run one user turn, streaming events as they happen.

        When the stream completes, the turn (user text, tool calls and outputs, reply) is in
        `history`. Implementations are async generators: closing one early (`aclose`, or
        cancelling the consuming task) cancels the run as `cancel()` does. Raises `AgentError`
        when the turn fails; a failed turn leaves `history` unchanged.
        """

    @abstractmethod
    async def update_tools(self, tools: Sequence[Any]) -> None:
        """Replace the whole tool list (pass every tool, not only new ones).

        The conversation is kept; the new list is what the model sees from its next call on,
        including the next call of a turn already running.
        """

    @abstractmethod
    async def cancel(self) -> None:
        """Stop the running turn promptly (barge-in); no-op when idle.

        History keeps the user's text, the tool calls that completed with their outputs, and
        the reply text streamed so far, marked as interrupted (see `record_interrupted_reply`).
        """

    @property
    @abstractmethod
    def history(self) -> list[dict[str, Any]]:
        """A copy of the messages the next turn will send, oldest first."""

    @abstractmethod
    def record_interrupted_reply(self, heard_text: str) -> None:
        """The last reply was cut off: keep only `heard_text` of it, marked as interrupted.

        The last turn's assistant text is replaced by one assistant message whose content is
        `mark_interrupted(heard_text)` (e.g. "It is sunny… [interrupted by the user]"); its
        tool calls and outputs stay, because those tools did run.
        """

    @abstractmethod
    def clear_history(self) -> None:
        """Forget the conversation (tools and system prompt stay)."""

    @abstractmethod
    def restore_history(self, items: Sequence[dict[str, Any]]) -> None:
        """Continue an earlier conversation: `items` (user and assistant messages, oldest first)
        become the history, bounded like any history; call it between turns."""
