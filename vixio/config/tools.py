"""Configuration of the agent's tools: built-ins, policy (docs/tool-systems.md §5), MCP servers.

Tool names in `toggles`, `sub_types`, `timeouts` and `require_confirmation` are a tool's
original name (`self.audio_speaker.set_volume`) or its public name, or a shell-style pattern
(`self.screen.*`); the most specific rule wins.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vixio.config.mcp import McpServersConfig
from vixio.core.settings import StrictModel
from vixio.core.tools.policy import ToolPolicy

BuiltinTool = Literal["get_time", "get_date", "reminders"]
"""`reminders`: set_reminder, list_reminders and cancel_reminder (docs/reminders.md)."""
BUILTIN_DEFAULT: tuple[BuiltinTool, ...] = ("get_time", "get_date")
SubTypeName = Literal["control", "query"]


class AsyncToolsConfig(StrictModel):
    """Background (async) tools: a call returns a task handle at once, the result is spoken later."""

    max_concurrent: int = Field(default=4, ge=1, le=1000)
    """Async tool tasks running at once in this process; more wait their turn."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds one async task may run before it is marked failed."""
    tools: list[str] = Field(default_factory=list)
    """Tools (names or patterns) to run in the background, besides local tools marked async."""


class ConfirmWordsConfig(StrictModel):
    """The user's words that answer a tool call's request for confirmation."""

    yes: list[str] = Field(default_factory=list)
    """A reply starting with one of these approves; unset: the top-level `language`'s words."""
    no: list[str] = Field(default_factory=list)
    """A reply containing one of these refuses, whatever else it says; unset: the `language`'s words."""


class LocalToolConfig(StrictModel):
    """One of your own Python functions offered as a tool, with options."""

    function: str = Field(min_length=3)
    """`package.module:function`, or `path/to/file.py:function` (relative to the working directory)."""
    name: str | None = None
    """The tool's name for the model; default: the function's name."""
    description: str | None = None
    """Default: the first paragraph of the function's docstring."""
    run_async: bool = Field(default=False, alias="async")
    """Run in the background: the call answers with a task handle at once, the result is told when it arrives (`async` in YAML)."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds a call (or its background run) may take; default: `tools.timeout`, or `async_tools.timeout` in the background. `timeouts` wins."""
    sub_type: SubTypeName | None = None
    """control: answered "success" at once without waiting; query: the model waits for the result. Default: `default_sub_type`."""


class ToolsConfig(StrictModel):
    """The tools the agent may call: local built-ins, the device's MCP tools, registerTools clients, MCP servers."""

    enabled: bool = True
    """Master switch: false gives the model no tools at all."""
    builtin: list[BuiltinTool] = Field(default_factory=lambda: list(BUILTIN_DEFAULT))
    """Local tools offered to every session; add `reminders` for set_reminder, list_reminders and cancel_reminder (docs/reminders.md)."""
    local: list[str | LocalToolConfig] = Field(default_factory=list)
    """Your own Python functions as tools: "package.module:function", "path/to/file.py:function", or {function, name, description, async, timeout, sub_type}; loaded at startup."""
    default_enabled: bool = True
    """Whether a tool not named in `toggles` is offered."""
    toggles: dict[str, bool] = Field(default_factory=dict)
    """Per-tool on/off, e.g. {"self.reboot": false, "self.screen.*": false}."""
    max_iterations: int = Field(default=5, ge=1, le=50)
    """Tool rounds per user turn; after the last, the model must answer without tools."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds a query tool call may take before the model is told it timed out."""
    timeouts: dict[str, float] = Field(default_factory=dict)
    """Per-tool timeouts in seconds, overriding `timeout`."""
    parallel: bool = True
    """Run several tool calls of one model response concurrently; false runs them one at a time."""
    require_confirmation: bool | list[str] = False
    """true: every tool needs the user's yes first; or a list of tool names (patterns) that do."""
    confirm_words: ConfirmWordsConfig = Field(default_factory=ConfirmWordsConfig)
    require_speaker: list[str] = Field(default_factory=list)
    """Tools (names or patterns) only an enrolled voice may run (`speakers.enabled`), e.g. ["unlock_door"]; an unknown voice, or typed text, is refused aloud (docs/speakers.md)."""
    default_sub_type: SubTypeName = "query"
    """query: the model waits for the result; control: answered "success" at once, the device is not waited for."""
    sub_types: dict[str, SubTypeName] = Field(default_factory=dict)
    """Per-tool sub_type, e.g. {"self.audio_speaker.set_volume": "control"}."""
    async_tools: AsyncToolsConfig = Field(default_factory=AsyncToolsConfig)
    read_only: list[str] = Field(
        default_factory=lambda: ["self.get_device_status", "get_time", "get_date", "list_reminders"]
    )
    """Tools (names or patterns) without side effects, which may run during a preemptive turn (before the user's turn is confirmed). Besides these, MCP tools marked `readOnlyHint` and local query tools may; control, async and confirmation-bound tools, and the device's and companions' tools, wait for the confirmation."""
    mcp_servers: McpServersConfig = Field(default_factory=dict)
    """Third-party MCP servers by name, in the `mcpServers` shape of desktop MCP clients (see examples/mcp_servers.yaml)."""

    def local_entries(self) -> list[LocalToolConfig]:
        """`local` with every entry in its long form."""
        return [LocalToolConfig(function=entry) if isinstance(entry, str) else entry for entry in self.local]

    def policy(self) -> ToolPolicy:
        """The policy. A `local` entry's own timeout travels with its tool (ToolDefinition.timeout),
        so every policy made from this config, a session's or the console's, applies it."""
        confirm = self.require_confirmation
        return ToolPolicy(
            enabled=self.enabled,
            default_enabled=self.default_enabled,
            toggles=dict(self.toggles),
            max_iterations=self.max_iterations,
            timeout=self.timeout,
            timeouts=dict(self.timeouts),
            parallel=self.parallel,
            require_confirmation=confirm if isinstance(confirm, bool) else tuple(confirm),
            default_sub_type=self.default_sub_type,
            sub_types=dict(self.sub_types),
            async_tools=tuple(self.async_tools.tools),
            confirm_yes=tuple(self.confirm_words.yes),
            confirm_no=tuple(self.confirm_words.no),
            read_only=tuple(self.read_only),
            require_speaker=tuple(self.require_speaker),
        )
