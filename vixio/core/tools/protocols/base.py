"""TextToolProtocol: what a text tool protocol must do (docs/tool-systems.md §4)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from vixio.core.tools.types import (
    CallProtocol,
    ToolCallRequest,
    ToolCallResult,
    ToolDefinition,
)


class TextToolProtocol(ABC):
    name: CallProtocol

    @abstractmethod
    def render_tools(self, tools: Sequence[ToolDefinition]) -> str:
        """The system-prompt section: the tools and how to call them (empty without tools)."""

    @abstractmethod
    def parse(self, text: str) -> list[ToolCallRequest]:
        """Every call in a finished reply, in order. Calls that could not be read fully are
        returned with `errors` set (the model is told); nothing raises on malformed text."""

    @abstractmethod
    def format_results(self, results: Sequence[tuple[ToolCallRequest, ToolCallResult]]) -> str:
        """The user-turn text that reports the results back to the model."""
