"""ToolPolicy: which tools the model may use and how calls run (docs/tool-systems.md §5).

Tool names in `toggles`, `sub_types`, `timeouts` and `require_confirmation` match a tool's
original name (`self.audio_speaker.set_volume`) or its public name, and may be shell-style
patterns (`self.screen.*`). The most specific rule wins: an exact name beats a pattern, and a
longer pattern beats a shorter one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TypeVar

from vixio.core.tools.confirmation import is_confirmation
from vixio.core.tools.context import is_affirmative
from vixio.core.tools.types import SubType, ToolDefinition

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    enabled: bool = True
    """Master switch: off, the model sees no tools at all."""
    default_enabled: bool = True
    """Whether a tool not named in `toggles` is offered."""
    toggles: Mapping[str, bool] = field(default_factory=dict)
    max_iterations: int = 5
    """Tool rounds per user turn; the model then has to answer."""
    timeout: float = 30.0
    """Seconds one query call may take before the model is told it timed out."""
    timeouts: Mapping[str, float] = field(default_factory=dict)
    parallel: bool = True
    """Run several calls of one model response concurrently; False runs them one by one."""
    require_confirmation: bool | tuple[str, ...] = False
    """True for every tool, or the tools that need the user's yes before they run."""
    default_sub_type: SubType = "query"
    sub_types: Mapping[str, SubType] = field(default_factory=dict)
    async_tools: tuple[str, ...] = ()
    """Tools (names or patterns) run in the background: the call returns a task handle at once."""
    confirm_yes: tuple[str, ...] = ()
    """Words that approve a call waiting for confirmation; empty: built-in English and Chinese."""
    confirm_no: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    """Tools (names or patterns) without side effects: they may run before a preemptive turn is
    confirmed, whatever their source."""

    def confirms(self, text: str) -> bool:
        """Whether the user's reply approves the calls that asked for confirmation."""
        if not self.confirm_yes:
            return is_affirmative(text)
        return is_confirmation(text, self.confirm_yes, self.confirm_no)

    def allows(self, tool: ToolDefinition) -> bool:
        if not self.enabled or tool.hidden:
            return False
        toggle = _lookup(self.toggles, _names(tool))
        return self.default_enabled if toggle is None else toggle

    def sub_type(self, tool: ToolDefinition) -> SubType:
        configured = _lookup(self.sub_types, _names(tool))
        return configured or tool.sub_type or self.default_sub_type

    def runs_async(self, tool: ToolDefinition) -> bool:
        return tool.is_async or _lookup(dict.fromkeys(self.async_tools, True), _names(tool)) is True

    def runs_before_confirmation(self, tool: ToolDefinition) -> bool:
        """Whether a call may run while the user's turn is not confirmed yet (a preemptive turn
        the user may still cancel by speaking on): only what has no side effect. Named in
        `read_only`, or read-only by its source's word (MCP `readOnlyHint`); otherwise not for
        control, async or confirmation-bound tools, nor for the device's and companions' tools
        (they act on the world), nor for MCP tools without the hint; a local query tool may."""
        if _lookup(dict.fromkeys(self.read_only, True), _names(tool)):
            return True
        if tool.read_only is not None:
            return tool.read_only and not self.runs_async(tool)
        if self.runs_async(tool) or self.needs_confirmation(tool) or self.sub_type(tool) == "control":
            return False
        return tool.source == "local"

    def configured_timeout(self, tool: ToolDefinition) -> float | None:
        """The timeout configured for this tool (by name or pattern in `timeouts`, else the tool's
        own); None when only the default applies."""
        configured = _lookup(self.timeouts, _names(tool))
        return tool.timeout if configured is None else configured

    def timeout_for(self, tool: ToolDefinition) -> float:
        configured = self.configured_timeout(tool)
        return self.timeout if configured is None else configured

    def needs_confirmation(self, tool: ToolDefinition) -> bool:
        rule = self.require_confirmation
        if isinstance(rule, bool):
            return rule
        return _lookup(dict.fromkeys(rule, True), _names(tool)) is True


def _names(tool: ToolDefinition) -> tuple[str, ...]:
    return tuple(dict.fromkeys((tool.source_name, tool.name)))


def _lookup(rules: Mapping[str, T], names: Iterable[str]) -> T | None:
    names = tuple(names)
    for name in names:
        if name in rules:
            return rules[name]
    matches = [pattern for pattern in rules if any(fnmatchcase(n, pattern) for n in names)]
    if not matches:
        return None
    return rules[max(matches, key=len)]
