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

httpcore (under httpx, under the openai SDK) asks each idle pooled connection whether its socket
has become readable (the server closed it) on every request and every response close. Its anyio
stream finds the socket through anyio's typed attributes, which build a mapping of lambdas and
call getpeername() every time: ~12 µs a connection instead of ~1.5 for the poll itself, times the
idle connections of a pool shared by every session (one per concurrent turn, 50 at 100 devices
on two workers), per request. The socket of a stream never changes, so it is looked up once.

httpcore writes a request as two sends (headers, then body) on anyio's socket stream, and anyio
ends every send with a checkpoint (`sleep(0)`) when the socket took the bytes at once: two loop
iterations on the way to every model call's first token, each waiting behind every other
session's work on a busy server (~10-15 ms apiece at 200 devices on 2 cores). A send that anyio
would write at once (plain TCP, open, not paused by flow control) is written the same way without
that checkpoint; anything else (TLS, a full buffer, a closed stream) takes anyio's own path.

The openai SDK's response models are built lazily (`defer_build`): the first `Response`,
`ResponseTextDeltaEvent`, `ChatCompletionChunk`... a process makes builds its pydantic schema,
~50-100 ms in all, on the event loop in the middle of the first turns, when every device that
connected at once is waiting for its first answer. `install()` builds the models openai-agents'
chat-completions path makes (those its stream handler and models name) once, before serving.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import typing
from typing import Any

from loguru import logger

_MODULE = "openai.resources.chat.completions.completions"
_PLAIN_SCALARS = (str, int, float, bool, type(None))
_MAX_PLAIN_NODES = 200_000

_POOL_BACKENDS = ("httpcore2._backends.anyio", "httpcore._backends.anyio")
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
_MISSING = object()


def install() -> bool:
    """Patch the SDK once; returns True when the fast paths are in place."""
    transform = _install_transform()
    chunks = _install_chunk_validation()
    readable = _install_readable_check()
    writes = _install_direct_write()
    prebuild_stream_models()
    return transform and chunks and readable and writes


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


def stream_models() -> list[type]:
    """The openai SDK models named by the chat-completions streaming modules that are not built yet."""
    try:
        base_model = importlib.import_module("pydantic").BaseModel
    except ImportError:
        return []
    found: dict[int, type] = {}
    modules = [_try_import(name) for name in _STREAM_MODULES]
    modules += [sys.modules.get(name) for name in _STREAM_MODULES_IF_LOADED]
    for module in filter(None, modules):
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, base_model) and value.__module__.startswith("openai.types.")
                    and not value.__dict__.get("__pydantic_complete__", True)):
                found[id(value)] = value
    return list(found.values())


def _try_import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _install_readable_check() -> bool:
    """`get_extra_info("is_readable")` of httpcore's anyio streams with the socket looked up once
    (see the module doc); True when at least one httpcore is patched."""
    patched = False
    for name in _POOL_BACKENDS:
        try:
            module = importlib.import_module(name)
            stream_type = module.AnyIOStream
            is_readable = module.is_socket_readable
            raw_socket = importlib.import_module("anyio.abc").SocketAttribute.raw_socket
        except (ImportError, AttributeError):
            continue
        original = stream_type.get_extra_info
        if not getattr(original, "vixio_fast_path", False):
            stream_type.get_extra_info = _readable_check(original, is_readable, raw_socket)
            logger.debug("{}: pooled connections' socket looked up once", name.partition(".")[0])
        patched = True
    return patched


def _install_direct_write() -> bool:
    """httpcore's `AnyIOStream.write` without anyio's trailing checkpoint when the bytes can go
    at once (see the module doc); True when at least one httpcore is patched."""
    try:
        socket_stream = importlib.import_module("anyio._backends._asyncio").SocketStream
    except (ImportError, AttributeError):
        return False
    patched = False
    for name in _POOL_BACKENDS:
        try:
            stream_type = importlib.import_module(name).AnyIOStream
        except (ImportError, AttributeError):
            continue
        original = stream_type.write
        if not getattr(original, "vixio_fast_path", False):
            stream_type.write = _direct_write(original, socket_stream)
            logger.debug("{}: requests written without a checkpoint per send", name.partition(".")[0])
        patched = True
    return patched


def _direct_write(original: Any, socket_stream: type) -> Any:
    async def write(self: Any, buffer: bytes, timeout: float | None = None) -> None:
        stream = self._stream
        if buffer and type(stream) is socket_stream and _writable_now(stream):
            with stream._send_guard:  # as anyio's send: one sender at a time
                stream._transport.write(buffer)
            return
        await original(self, buffer, timeout)

    write.vixio_fast_path = True  # type: ignore[attr-defined]
    write.original = original  # type: ignore[attr-defined]
    return write


def _writable_now(stream: Any) -> bool:
    """What anyio's `SocketStream.send` checks before writing, all passing without a wait."""
    try:
        return (stream._protocol.write_event.is_set() and not stream._closed
                and stream._protocol.exception is None and not stream._transport.is_closing())
    except AttributeError:  # another anyio: its own path
        return False


def _readable_check(original: Any, is_readable: Any, raw_socket: Any) -> Any:
    def get_extra_info(self: Any, info: str) -> Any:
        if info != "is_readable":
            return original(self, info)
        sock = self.__dict__.get("_vixio_socket", _MISSING)
        if sock is _MISSING:
            sock = self._vixio_socket = self._stream.extra(raw_socket, None)
        return is_readable(sock)

    get_extra_info.vixio_fast_path = True  # type: ignore[attr-defined]
    get_extra_info.original = original  # type: ignore[attr-defined]
    return get_extra_info


def _install_chunk_validation() -> bool:
    try:
        base_client = importlib.import_module("openai._base_client")
        chunk_type = importlib.import_module("openai.types.chat").ChatCompletionChunk
        validation_error = importlib.import_module("pydantic").ValidationError
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
