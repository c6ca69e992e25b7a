"""Skip the openai SDK's request transform when it cannot change anything.

Every chat-completions request (litellm's `openai/...` path and openai-agents' own) passes its
body through `openai._utils.async_maybe_transform`, which walks the messages against the
params' TypedDicts, trying each of the six message types of the union for every message, one
coroutine per node: ~10-30 ms of event-loop time per turn with a 20-message history, during
which no other session runs. The transform only renames keys with a `PropertyInfo(alias=...)`
and formats dates and files (`PropertyInfo(format=...)`); for a params type that declares
neither anywhere in its type tree, and a body of plain JSON values, its result equals its
input. `install()` checks both conditions once per params type (falling back to the SDK's
transform otherwise), so a future SDK that adds an alias is still transformed correctly.
"""

from __future__ import annotations

import importlib
import typing
from typing import Any

from loguru import logger

_MODULE = "openai.resources.chat.completions.completions"
_PLAIN_SCALARS = (str, int, float, bool, type(None))
_MAX_PLAIN_NODES = 200_000

_identity_types: dict[Any, bool] = {}


def install() -> bool:
    """Patch the chat-completions module once; returns True when the fast path is in place."""
    try:
        module = importlib.import_module(_MODULE)
        transform_module = importlib.import_module("openai._utils._transform")
    except ImportError:
        return False
    original = module.async_maybe_transform
    if getattr(original, "vixio_fast_path", False):
        return True
    property_info = transform_module.PropertyInfo
    is_given = transform_module.is_given

    async def maybe_transform(data: object, expected_type: object) -> Any:
        if type(data) is dict and _is_identity(expected_type, property_info):
            # create() passes every parameter, the unset ones as sentinels the transform drops.
            given = {key: value for key, value in data.items() if is_given(value)}
            if is_plain_json(given):
                return given
        return await original(data, expected_type)

    maybe_transform.vixio_fast_path = True  # type: ignore[attr-defined]
    maybe_transform.original = original  # type: ignore[attr-defined]
    module.async_maybe_transform = maybe_transform
    logger.debug("openai SDK: request transform skipped for plain chat-completions bodies")
    return True


def _is_identity(expected_type: object, property_info: type) -> bool:
    known = _identity_types.get(expected_type)
    if known is None:
        try:
            known = not _declares_transform(expected_type, property_info, set())
        except Exception:  # noqa: BLE001 - an unreadable type tree keeps the SDK's own transform
            known = False
        _identity_types[expected_type] = known
    return known


def _declares_transform(tp: Any, property_info: type, seen: set[int]) -> bool:
    """True when an alias or a format appears anywhere in the type tree of `tp`."""
    if id(tp) in seen:
        return False
    seen.add(id(tp))
    for meta in getattr(tp, "__metadata__", ()):  # Annotated[T, PropertyInfo(...)]
        if isinstance(meta, property_info) and (meta.alias is not None or meta.format is not None):
            return True
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return any(_declares_transform(hint, property_info, seen) for hint in hints.values())
    return any(_declares_transform(arg, property_info, seen) for arg in typing.get_args(tp))


def is_plain_json(data: object) -> bool:
    """dicts with string keys, lists, strings, numbers, booleans and None only (bounded walk)."""
    stack = [data]
    budget = _MAX_PLAIN_NODES
    while stack:
        budget -= 1
        if budget < 0:
            return False
        value = stack.pop()
        if isinstance(value, _PLAIN_SCALARS):
            continue
        if type(value) is dict:
            for key, item in value.items():
                if type(key) is not str:
                    return False
                stack.append(item)
        elif type(value) is list:
            stack.extend(value)
        else:
            return False  # tuples, iterables, models, sentinels, dates, files: the SDK's transform
    return True
