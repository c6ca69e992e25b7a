"""Limits on tools that peers declare (a device's MCP tools/list, registerTools clients).

Every tool a peer declares is put into each of the session's model requests and its schema is
run for each call, so a peer must not be able to declare ten thousand tools, a megabyte schema
or one nested hundreds of levels deep. The defaults leave real devices far inside them: the
firmware sends pages of at most 8000 bytes and a few dozen tools.

Each refusal names the limit's config key, so an operator who needs more knows what to raise.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pydantic import Field

from vixio.core.json_limits import value_depth
from vixio.core.settings import StrictModel
from vixio.core.tools.arguments import schema_problem

CONFIG_KEY = "xiaozhi.mcp.limits"
"""Where these limits live in config.yaml; refusals name `<CONFIG_KEY>.<field>`."""


class ToolLimitsConfig(StrictModel):
    """Bounds on the tools a device or registerTools client declares; excess is refused and logged once."""

    tools_per_source: int = Field(default=64, ge=1)
    """Tools one source may declare: the device's MCP tool list, or one registerTools registration."""
    tools_per_session: int = Field(default=128, ge=1)
    """Tools all peer sources of one session (device MCP plus registerTools) may declare together."""
    schema_bytes: int = Field(default=8000, ge=64)
    """Largest `inputSchema`/`parameters` of one tool, as compact JSON (the firmware's whole tools/list page is at most 8000 bytes)."""
    schema_depth: int = Field(default=16, ge=2)
    """Deepest nesting of one tool's schema (a firmware schema nests 3 levels)."""
    description_chars: int = Field(default=4000, ge=16)
    """Longest tool description."""
    name_chars: int = Field(default=128, ge=8)
    """Longest tool name."""
    registrations_per_minute: int = Field(default=10, ge=1)
    """`mcp/registerTools` requests one session may send per minute, and one Device-Id over all its connections (counted in the state store: on every worker, and with `state.backend: redis` on every instance); more are refused with a JSON-RPC error."""


def tool_problem(name: str, description: str, schema: Any, limits: ToolLimitsConfig) -> str | None:
    """Why one declared tool is refused (naming the limit), or None when it is within limits."""
    if len(name) > limits.name_chars:
        return f"the name has {len(name)} characters; {CONFIG_KEY}.name_chars is {limits.name_chars}"
    if len(description) > limits.description_chars:
        return (
            f"the description has {len(description)} characters; "
            f"{CONFIG_KEY}.description_chars is {limits.description_chars}"
        )
    if schema is None:
        return None
    depth = value_depth(schema, limits.schema_depth)
    if depth > limits.schema_depth:
        return f"the schema nests deeper than {CONFIG_KEY}.schema_depth ({limits.schema_depth} levels)"
    size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode())
    if size > limits.schema_bytes:
        return f"the schema is {size} bytes; {CONFIG_KEY}.schema_bytes is {limits.schema_bytes}"
    if isinstance(schema, dict):
        return schema_problem(schema)
    return None


class ToolBudget:
    """How many tools each peer source of one session may still declare (per source and in all)."""

    def __init__(self, limits: ToolLimitsConfig) -> None:
        self.limits = limits
        self._granted: dict[str, int] = {}

    def allowance(self, source: str) -> int:
        """Tools `source` may declare now, its earlier declaration being replaced."""
        others = sum(count for name, count in self._granted.items() if name != source)
        return max(0, min(self.limits.tools_per_source, self.limits.tools_per_session - others))

    def refusal(self, source: str, count: int) -> str | None:
        """Why `count` tools from `source` exceed the budget (naming the limit), or None."""
        if count > self.limits.tools_per_source:
            return f"{count} tools; {CONFIG_KEY}.tools_per_source is {self.limits.tools_per_source}"
        if count > self.allowance(source):
            return (
                f"{count} tools, with {self.limits.tools_per_session - self.allowance(source)} already declared "
                f"by other sources of this session; {CONFIG_KEY}.tools_per_session is "
                f"{self.limits.tools_per_session}"
            )
        return None

    def take(self, source: str, count: int) -> None:
        """Record that `source` now declares `count` tools (replacing its earlier count)."""
        self._granted[source] = count

    def release(self, source: str) -> None:
        self._granted.pop(source, None)


class RateWindow:
    """At most `limit` events per `window` seconds (a sliding window)."""

    def __init__(self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        """Count one event if it is within the rate; False (not counted) when it is not."""
        now = self._clock()
        while self._times and now - self._times[0] >= self.window:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True
