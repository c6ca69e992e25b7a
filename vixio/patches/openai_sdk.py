"""Skip openai SDK work that cannot change the result: the request transform and the
per-chunk model construction of a streamed chat completion.

Every chat-completions request (litellm's `openai/...` path and openai-agents' own) passes its
body through `openai._utils.async_maybe_transform`, which walks the messages against the
params' TypedDicts, trying each of the six message types of the union for every message, one
coroutine per node: ~10-30 ms of event-loop time per turn with a 20-message history, during
which no other session runs. The transform only renames keys with a `PropertyInfo(alias=...)`
and formats dates and files (`PropertyInfo(format=...)`); for a params type that declares
neither anywhere in its type tree, and a body of plain JSON values, its result equals its
input. `install()` checks both conditions once per params type (falling back to the SDK's
transform otherwise), so a future SDK that adds an alias is still transformed correctly.

Each streamed chunk is turned into a `ChatCompletionChunk` by the SDK's `construct_type`, a
pure-Python walk of the type annotations (~150 us per chunk, one chunk per token). pydantic's
own validator builds the same model in ~7 us; a chunk it refuses (an off-spec server's value,
e.g. an unknown `finish_reason`) is built by the SDK's walk as before, so nothing that streamed
before is refused now.

The openai SDK's response models are built lazily (`defer_build`): the first `Response`,
`ResponseTextDeltaEvent`, `ChatCompletionChunk`... a process makes builds its pydantic schema,
~50-100 ms in all, on the event loop in the middle of the first turns, when every device that
connected at once is waiting for its first answer. `install()` builds the models openai-agents'
chat-completions path makes (those its stream handler and models name) once, before serving.

Upstream would need `async_maybe_transform` to return a body unchanged when the params type
declares no alias or format (decided once per type), and the stream to build chunks with
pydantic's validator, keeping `construct_type` as the fallback for off-spec values.
"""

from __future__ import annotations

import contextlib
import sys
import typing
from typing import Any

from loguru import logger

from vixio.patches import allowed, load

DISTRIBUTION = "openai"
CHECKED = ("3.",)
"""openai SDK versions checked (prefixes; last checked 3.57)."""

_MODULE = "openai.resources.chat.completions.completions"
_PLAIN_SCALARS = (str, int, float, bool, type(None))
_MAX_PLAIN_NODES = 200_000

_STREAM_MODULES = (
    "agents.models.chatcmpl_stream_handler",
    "agents.models.openai_chatcompletions",
    "openai.types.chat.chat_completion_chunk",
    "openai.types.responses.response_usage",
)
_STREAM_MODULES_IF_LOADED = ("agents.extensions.models.litellm_model",)
"""Looked at only when already imported (importing litellm takes seconds)."""
_prebuilt = False
_identity_types: dict[Any, bool] = {}


def install() -> bool:
    """Install the patches once (and prebuild the stream models); True when all are in place."""
    if not allowed(DISTRIBUTION, CHECKED, "request transforms and streamed chunks"):
        return False
    transform = _install_transform()
    chunks = _install_chunk_validation()
    prebuild_stream_models()
    return transform and chunks


def prebuild_stream_models() -> int:
    """Build the deferred openai response models a streamed turn makes (see the module doc),
    once per process; returns how many were built."""
    global _prebuilt
    if _prebuilt:
        return 0
    _prebuilt = True
    models = stream_models()
    built = 0
    for model in models:
        try:
            model.model_rebuild()
            built += 1
        except Exception as exc:  # noqa: BLE001 - left to be built at first use, as before
            logger.debug("openai SDK: {} not prebuilt ({})", model.__name__, exc)
    logger.debug("openai SDK: {} response model(s) built before the first turn", built)
    return built


def stream_models() -> list[Any]:
    """The openai SDK models named by the chat-completions streaming modules that are not built yet."""
    try:
        base_model = load("pydantic").BaseModel
    except ImportError:
        return []
    found: dict[int, Any] = {}
    modules = [_try_import(name) for name in _STREAM_MODULES]
    modules += [sys.modules.get(name) for name in _STREAM_MODULES_IF_LOADED]
    for module in filter(None, modules):
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, base_model)
                and value.__module__.startswith("openai.types.")
                and not value.__dict__.get("__pydantic_complete__", True)
            ):
                found[id(value)] = value
    return list(found.values())


def _try_import(name: str) -> Any:
    try:
        return load(name)
    except ImportError:
        return None


def _install_chunk_validation() -> bool:
    try:
        base_client = load("openai._base_client")
        chunk_type = load("openai.types.chat").ChatCompletionChunk
        validation_error = load("pydantic").ValidationError
    except (ImportError, AttributeError):
        return False
    owner = base_client.BaseClient
    original = owner._process_response_data
    if getattr(original, "vixio_fast_path", False):
        return True

    def process_response_data(self: Any, *, data: object, cast_to: Any, response: Any) -> Any:
        if cast_to is chunk_type and type(data) is dict and not self._strict_response_validation:
            # A chunk pydantic refuses is off-spec but readable: the SDK builds it without
            # validating below, as it always did.
            with contextlib.suppress(validation_error):
                return _as_constructed(chunk_type.model_validate(data))
        return original(self, data=data, cast_to=cast_to, response=response)

    process_response_data.vixio_fast_path = True  # type: ignore[attr-defined]
    process_response_data.original = original  # type: ignore[attr-defined]
    owner._process_response_data = process_response_data
    logger.debug("openai SDK: streamed chat chunks built by pydantic's validator")
    return True


def _as_constructed(model: Any) -> Any:
    """pydantic counts extra keys (e.g. DeepSeek's `reasoning_content`) as set fields; the SDK's
    builder does not. Made the same, so `model_dump(exclude_unset=True)` is too."""
    stack = [model]
    while stack:
        node = stack.pop()
        extra = node.__pydantic_extra__
        if extra:
            object.__setattr__(node, "__pydantic_fields_set__", node.__pydantic_fields_set__ - extra.keys())
        for value in node.__dict__.values():
            if isinstance(value, list):
                stack.extend(item for item in value if hasattr(item, "__pydantic_extra__"))
            elif hasattr(value, "__pydantic_extra__"):
                stack.append(value)
    return model


def _install_transform() -> bool:
    try:
        module = load(_MODULE)
        transform_module = load("openai._utils._transform")
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


def _is_identity(expected_type: object, property_info: Any) -> bool:
    known = _identity_types.get(expected_type)
    if known is None:
        try:
            known = not _declares_transform(expected_type, property_info, set())
        except Exception:  # noqa: BLE001 - an unreadable type tree keeps the SDK's own transform
            known = False
        _identity_types[expected_type] = known
    return known


def _declares_transform(tp: Any, property_info: Any, seen: set[int]) -> bool:
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
