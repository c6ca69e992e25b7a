"""Local tools: plain Python functions the agent may call, and the built-in ones.

`func_to_tool_definition(func)` turns any function with type hints into a `ToolDefinition`:
the name is the function's, the description its docstring's first paragraph, the parameters a
JSON Schema built by pydantic from the signature (`Annotated[int, Field(description=...)]`
works). Sync functions run on a worker thread so a slow one cannot stall the event loop.

    async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
        \"\"\"Today's weather in a city.\"\"\"
        ...

    tool = func_to_tool_definition(get_weather)
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import datetime
from typing import Any, get_type_hints

from pydantic import ConfigDict, create_model

from vixio.core.tools.types import ToolDefinition


async def get_time() -> str:
    """Get the current local date and time (with the weekday and the UTC offset)."""
    now = datetime.now().astimezone()
    return now.strftime("%Y-%m-%d %H:%M:%S %A (UTC%z)")


async def get_date() -> str:
    """Get today's local date with the weekday."""
    return datetime.now().astimezone().strftime("%Y-%m-%d %A")


BUILTIN_LOCAL_TOOLS: list[Callable[..., Any]] = [get_time, get_date]
"""Functions every agent may use unless the tool policy turns them off."""


def builtin_tool(name: str) -> Callable[..., Any]:
    """A built-in tool function by name; KeyError names the ones that exist."""
    for func in BUILTIN_LOCAL_TOOLS:
        if func.__name__ == name:
            return func
    raise KeyError(f"no built-in tool {name!r}; built-ins are {', '.join(f.__name__ for f in BUILTIN_LOCAL_TOOLS)}")


def func_to_tool_definition(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    is_async: bool = False,
) -> ToolDefinition:
    """A `ToolDefinition` running `func` (sync or async) with validated keyword arguments."""
    signature = inspect.signature(func)
    hints = get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model = create_model(f"{func.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("properties", {})

    async def run(arguments: dict[str, Any]) -> Any:
        values = dict(model.model_validate(arguments))
        if inspect.iscoroutinefunction(func):
            return await func(**values)
        result = await asyncio.to_thread(func, **values)
        return await result if inspect.isawaitable(result) else result

    return ToolDefinition(
        name=name or func.__name__,
        description=description if description is not None else _summary(func),
        parameters=schema,
        source="local",
        executor=run,
        is_async=is_async,
    )


def _summary(func: Callable[..., Any]) -> str:
    doc = inspect.getdoc(func) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()
