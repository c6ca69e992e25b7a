"""The local tools every session of a voice stack gets: the built-ins made here (the clock's:
`reminders` needs the store, so the server binds those) and `tools.local`, the owner's Python
functions imported from the config, every failing entry reported at once."""

from __future__ import annotations

from loguru import logger

from vixio.config.models import VixioConfig
from vixio.config.pipeline import resolve_timezone
from vixio.core.tools.local import ToolLoadError, builtin_tool, func_to_tool_definition, load_tool_function
from vixio.core.tools.types import ToolDefinition


def builtin_tools(config: VixioConfig) -> list[ToolDefinition]:
    """`tools.builtin` but `reminders`, in the agent's time zone."""
    zone = resolve_timezone(config.agent.timezone) if config.agent is not None else None
    return [func_to_tool_definition(builtin_tool(name, zone)) for name in builtin_names(config)]


def configured_local_tools(config: VixioConfig) -> list[ToolDefinition]:
    """`tools.local`, imported now; every entry that fails is reported at once (ConfigError)."""
    from vixio.config.loader import ConfigError

    tools, errors = [], []
    for entry in config.tools.local_entries():
        try:
            func = load_tool_function(entry.function)
            tool = func_to_tool_definition(
                func,
                name=entry.name,
                description=entry.description,
                is_async=entry.run_async,
                sub_type=entry.sub_type,
                timeout=entry.timeout,
            )
        except ToolLoadError as exc:
            errors.append(str(exc))
            continue
        except Exception as exc:  # e.g. a parameter type pydantic cannot describe
            errors.append(
                f"tools.local entry {entry.function!r}: cannot describe it as a tool: {type(exc).__name__}: {exc}"
            )
            continue
        tools.append(tool)
    if errors:
        raise ConfigError("tools.local", errors)
    if tools:
        logger.info("local tools from config: {}", ", ".join(tool.name for tool in tools))
    return tools


def builtin_names(config: VixioConfig) -> list[str]:
    """The built-ins made here (`reminders` needs the store: the server binds those)."""
    return [name for name in config.tools.builtin if name != "reminders"]
