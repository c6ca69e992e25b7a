"""httpcore's pooled connections (under httpx, under the openai SDK) without per-request overhead
that cannot change the result: two patches of `AnyIOStream`, checked on httpcore 1.0 with anyio 4.

**Readable check.** httpcore asks each idle pooled connection whether its socket has become
readable (the server closed it) on every request and every response close. Its anyio stream finds
the socket through anyio's typed attributes, which build a mapping of lambdas and call
getpeername() every time: ~12 µs a connection instead of ~1.5 for the poll itself, times the idle
connections of a pool shared by every session (one per concurrent turn, 50 at 100 devices on two
workers), per request. The socket of a stream never changes, so it is looked up once. Upstream
would need `AnyIOStream` to cache its raw socket.

**Direct write.** httpcore writes a request as two sends (headers, then body) on anyio's socket
stream, and anyio ends every send with a checkpoint (`sleep(0)`) when the socket took the bytes at
once: two loop iterations on the way to every model call's first token, each waiting behind every
other session's work on a busy server (~10-15 ms apiece at 200 devices on 2 cores). A send that
anyio would write at once (plain TCP, open, not paused by flow control) is written the same way
without that checkpoint; anything else (TLS, a full buffer, a closed stream) takes anyio's own
path. This reads anyio's private `SocketStream` state (`_protocol.write_event`, `_closed`,
`_transport`, `_send_guard`). Upstream would need anyio's `send` to skip the checkpoint when the
write completed synchronously (or httpcore to write headers and body in one send).

Both patch `httpcore._backends.anyio` and the `httpcore2` fork's copy of it (the HTTP library
of openai 3.x), each where it is installed and of a checked version.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from vixio.patches import allowed, installed_version, load

CHECKED = {"httpcore2": ("2.",), "httpcore": ("1.0.",)}
"""Versions checked (prefixes) per distribution: the fork (httpcore2 2.16) and httpcore 1.0.9."""
ANYIO_CHECKED = ("4.",)
"""anyio versions whose `SocketStream` internals the direct write reads (prefixes)."""
BACKENDS = {"httpcore2": "httpcore2._backends.anyio", "httpcore": "httpcore._backends.anyio"}
_MISSING = object()


def install() -> bool:
    """Install both patches once in each installed, checked httpcore; True when at least one
    has both in place."""
    backends = [
        BACKENDS[name]
        for name, checked in CHECKED.items()
        if installed_version(name) and allowed(name, checked, "pooled connections' readable check and writes")
    ]
    if not backends:
        return False
    readable = _install_readable_check(backends)
    writes = allowed("anyio", ANYIO_CHECKED, "httpcore's request writes") and _install_direct_write(backends)
    return readable and writes


def _install_readable_check(backends: list[str]) -> bool:
    """`get_extra_info("is_readable")` of httpcore's anyio streams with the socket looked up once;
    True when at least one httpcore is patched."""
    patched = False
    for name in backends:
        try:
            module = load(name)
            stream_type = module.AnyIOStream
            is_readable = module.is_socket_readable
            raw_socket = load("anyio.abc").SocketAttribute.raw_socket
        except (ImportError, AttributeError):
            continue
        original = stream_type.get_extra_info
        if not getattr(original, "vixio_fast_path", False):
            stream_type.get_extra_info = _readable_check(original, is_readable, raw_socket)
            logger.debug("{}: pooled connections' socket looked up once", name.partition(".")[0])
        patched = True
    return patched


def _install_direct_write(backends: list[str]) -> bool:
    """httpcore's `AnyIOStream.write` without anyio's trailing checkpoint when the bytes can go
    at once; True when at least one httpcore is patched."""
    try:
        socket_stream = load("anyio._backends._asyncio").SocketStream
    except (ImportError, AttributeError):
        return False
    patched = False
    for name in backends:
        try:
            stream_type = load(name).AnyIOStream
        except (ImportError, AttributeError):
            continue
        original = stream_type.write
        if not getattr(original, "vixio_fast_path", False):
            stream_type.write = _direct_write(original, socket_stream)
            logger.debug("{}: requests written without a checkpoint per send", name.partition(".")[0])
        patched = True
    return patched


def _direct_write(original: Any, socket_stream: Any) -> Any:
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
        return (
            stream._protocol.write_event.is_set()
            and not stream._closed
            and stream._protocol.exception is None
            and not stream._transport.is_closing()
        )
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
