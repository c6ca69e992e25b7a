"""Local tools: plain Python functions the agent may call, and the built-in ones.

`func_to_tool_definition(func)` turns any function with type hints into a `ToolDefinition`:
the name is the function's, the description its docstring's first paragraph, the parameters a
JSON Schema built by pydantic from the signature (`Annotated[int, Field(description=...)]`
works). Sync functions run on a worker thread so a slow one cannot stall the event loop.

    async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
        \"\"\"Today's weather in a city.\"\"\"
        ...

    tool = func_to_tool_definition(get_weather)

A parameter annotated `ToolContext` is not shown to the model: it receives who called (session,
device, call id), the session's `ToolCallContext` and `say()`. `load_tool_function("pkg.mod:func")`
or `load_tool_function("path/to/file.py:func")` imports a function named in config.yaml
(`tools.local`).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import ConfigDict, create_model

from vixio.core.tools.context import ToolContext, current_tool_context
from vixio.core.tools.types import SubType, ToolDefinition


class ToolLoadError(Exception):
    """A `tools.local` entry could not be loaded; the message names the entry and the reason."""


def clock_tools(zone: tzinfo | None = None) -> list[Callable[..., Any]]:
    """`get_time` and `get_date` telling the time in `zone` (None: the machine's zone)."""

    async def get_time() -> str:
        """Get the current local date and time (with the weekday and the UTC offset)."""
        return datetime.now(zone).astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %A (UTC%z)")

    async def get_date() -> str:
        """Get today's local date with the weekday."""
        return datetime.now(zone).astimezone(zone).strftime("%Y-%m-%d %A")

    return [get_time, get_date]


BUILTIN_LOCAL_TOOLS: list[Callable[..., Any]] = clock_tools()
"""Functions every agent may use unless the tool policy turns them off."""
get_time, get_date = BUILTIN_LOCAL_TOOLS


def builtin_tool(name: str, zone: tzinfo | None = None) -> Callable[..., Any]:
    """A built-in tool function by name, its clock in `zone` (`agent.timezone`); KeyError names
    the ones that exist."""
    for func in clock_tools(zone) if zone is not None else BUILTIN_LOCAL_TOOLS:
        if func.__name__ == name:
            return func
    raise KeyError(f"no built-in tool {name!r}; built-ins are {', '.join(f.__name__ for f in BUILTIN_LOCAL_TOOLS)}")


def func_to_tool_definition(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    is_async: bool = False,
    sub_type: SubType | None = None,
    timeout: float | None = None,
) -> ToolDefinition:
    """A `ToolDefinition` running `func` (sync or async) with validated keyword arguments."""
    signature = inspect.signature(func)
    hints = get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    context_params: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context_params.append(param.name)
            continue
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
        if context_params:
            context = current_tool_context.get() or ToolContext(tool_name=name or func.__name__)
            values.update(dict.fromkeys(context_params, context))
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
        sub_type=sub_type,
        timeout=timeout,
    )


def load_tool_function(spec: str, *, base_dir: Path | None = None) -> Callable[..., Any]:
    """The function a `tools.local` entry names: `package.module:function` (importable) or
    `path/to/file.py:function` (relative to `base_dir`, else the working directory).

    Raises `ToolLoadError` naming the entry and why (no colon, no such module or file, an
    import error inside it, no such attribute, not callable).
    """
    target, sep, attribute = spec.rpartition(":")
    if not sep or not target.strip() or not attribute.strip() or not attribute.isidentifier():
        raise ToolLoadError(
            f'tools.local entry {spec!r}: expected "package.module:function" or "path/to/file.py:function"'
        )
    target = target.strip()
    if target.endswith(".py") or "/" in target or "\\" in target:
        module = _import_file(spec, target, base_dir)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and target.startswith(exc.name):
                raise ToolLoadError(
                    f"tools.local entry {spec!r}: no module named {exc.name!r} (is it installed, or on PYTHONPATH?)"
                ) from exc
            raise ToolLoadError(f"tools.local entry {spec!r}: importing {target} failed: {exc}") from exc
        except Exception as exc:
            raise ToolLoadError(
                f"tools.local entry {spec!r}: importing {target} failed: {type(exc).__name__}: {exc}"
            ) from exc
    func = getattr(module, attribute, None)
    if func is None:
        raise ToolLoadError(f"tools.local entry {spec!r}: {target} has no function {attribute!r}")
    if not callable(func):
        raise ToolLoadError(
            f"tools.local entry {spec!r}: {target}.{attribute} is a {type(func).__name__}, not a function"
        )
    function: Callable[..., Any] = func
    return function


def _import_file(spec: str, target: str, base_dir: Path | None) -> Any:
    path = Path(target).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    if not path.is_file():
        raise ToolLoadError(f"tools.local entry {spec!r}: there is no file {path}")
    # One module per file path, so two entries of one file share its globals.
    name = f"vixio_local_tools_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ToolLoadError(f"tools.local entry {spec!r}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ToolLoadError(f"tools.local entry {spec!r}: running {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def _summary(func: Callable[..., Any]) -> str:
    doc = inspect.getdoc(func) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()
