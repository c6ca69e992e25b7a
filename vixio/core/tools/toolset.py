"""ToolSet: one session's tools from every source, named for the model and filtered by policy.

Sources replace their own slice (`set_tools("device", defs)` when tools/list completes, again
on `list_changed`); listeners hear about every change, which is how the agent's tool list is
hot-swapped mid-session. The definitions handed out carry public names (see `names.py`) and
descriptions that refer to other tools by those names.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from loguru import logger

from vixio.core.cooperative import map_in_slices
from vixio.core.tools.names import ToolNameMapper
from vixio.core.tools.policy import ToolPolicy
from vixio.core.tools.types import ToolDefinition

ToolsListener = Callable[[list[ToolDefinition]], Awaitable[None]]


class ToolSet:
    def __init__(self, policy: ToolPolicy | None = None, *, session_id: str = "") -> None:
        self.policy = policy or ToolPolicy()
        self._sources: dict[str, list[ToolDefinition]] = {}
        self._mapper = ToolNameMapper()
        self._public: list[ToolDefinition] = []
        self._by_name: dict[str, ToolDefinition] = {}
        self._listeners: list[ToolsListener] = []
        self._logger = logger.bind(session=session_id or "-", component="tools")

    # --- sources ------------------------------------------------------------------------------

    def set_tools(self, key: str, tools: Sequence[ToolDefinition]) -> list[ToolDefinition]:
        """Replace the tools of source `key` ("local", "device", "mcp:<server>"...); returns the
        public list. Listeners are not called: use `update` for that."""
        self._replace_source(key, tools)
        return self._rebuild()

    async def update(self, key: str, tools: Sequence[ToolDefinition] | None) -> list[ToolDefinition]:
        """Replace (or, with None, drop) a source's tools and tell the listeners.

        Builds the public list in slices (a device may hand over hundreds of tools at once), so
        other sessions on the loop keep running meanwhile."""
        self._replace_source(key, tools)
        public = await self._rebuild_in_slices()
        for listener in list(self._listeners):
            await listener(list(public))
        return public

    async def republish(self) -> list[ToolDefinition]:
        """Rebuild the public list (after the policy changed) and tell the listeners."""
        public = await self._rebuild_in_slices()
        for listener in list(self._listeners):
            await listener(list(public))
        return public

    def _replace_source(self, key: str, tools: Sequence[ToolDefinition] | None) -> None:
        if tools is None:
            self._sources.pop(key, None)
        else:
            self._sources[key] = list(tools)

    def add_listener(self, listener: ToolsListener) -> None:
        self._listeners.append(listener)

    def clear(self) -> None:
        self._sources.clear()
        self._listeners.clear()
        self._rebuild()

    # --- what the model sees ------------------------------------------------------------------

    @property
    def tools(self) -> list[ToolDefinition]:
        """The tools the model may call, with public names."""
        return list(self._public)

    def sources(self) -> dict[str, int]:
        return {key: len(tools) for key, tools in self._sources.items()}

    def source_tools(self) -> dict[str, list[ToolDefinition]]:
        """Every source's tools with their source names, offered or not (the operator console)."""
        return {key: list(tools) for key, tools in self._sources.items()}

    def resolve(self, name: str) -> ToolDefinition | None:
        """An offered tool by public name, or by original name (text protocols may use it)."""
        tool = self._by_name.get(name)
        if tool is not None:
            return tool
        for candidate in self._public:
            if candidate.original_name == name:
                return candidate
        return None

    def find_any(self, name: str) -> ToolDefinition | None:
        """A tool by name whether or not the policy offers it (for clear refusals)."""
        for tools in self._sources.values():
            for tool in tools:
                if name in (tool.name, tool.source_name):
                    return tool
        return None

    def _rebuild(self) -> list[ToolDefinition]:
        allowed, names = self._assign()
        return self._publish([self._public_definition(entry, names) for entry in allowed])

    async def _rebuild_in_slices(self) -> list[ToolDefinition]:
        allowed, names = self._assign()
        return self._publish(await map_in_slices(lambda entry: self._public_definition(entry, names), allowed))

    def _assign(self) -> tuple[list[tuple[str, ToolDefinition]], dict[tuple[str, str], str]]:
        allowed = [(key, tool) for key, tools in self._sources.items() for tool in tools if self.policy.allows(tool)]
        return allowed, self._mapper.assign((key, tool.source_name) for key, tool in allowed)

    def _public_definition(
        self, entry: tuple[str, ToolDefinition], names: dict[tuple[str, str], str]
    ) -> ToolDefinition:
        key, tool = entry
        return tool.renamed(names[(key, tool.source_name)], self._mapper.rewrite(tool.description))

    def _publish(self, public: list[ToolDefinition]) -> list[ToolDefinition]:
        self._public = public
        self._by_name = {tool.name: tool for tool in public}
        if len(self._by_name) != len(public):  # cannot happen: the mapper makes names unique
            self._logger.error("duplicate public tool names: {}", [t.name for t in public])
        return list(public)
