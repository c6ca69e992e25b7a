"""A real OpenAI-compatible chat-completions server on loopback, scripted reply by reply.

Tests point an HTTP client (litellm, the openai SDK, ...) at `server.base_url` and script what
the "model" answers, so the whole path — HTTP, SSE parsing, tool-call assembly — is exercised
offline:

    async with ScriptedLLMServer() as server:
        server.expect(
            Reply.tool_call("get_weather", {"city": "Paris"}),
            Reply.text("It is sunny in Paris."),
        )
        ...  # run the agent against server.base_url
        assert server.requests[1]["messages"][-1]["role"] == "tool"
        server.assert_all_consumed()

Fault modes act out what real servers do wrong: `Reply.faulty("reset", text, after=5)` sends
five deltas and then drops the connection; "stall" stops sending, "malformed" sends broken SSE;
`Reply.empty()` answers nothing; `Reply.hang()` never answers.

`server.rule = lambda body: Reply.text(...) or None` answers by a fixed rule instead (consulted
before the queue; None falls through to it): a long session whose every request cannot be
scripted in order, e.g. a model that also extracts memory facts (tests/state/test_long_session.py).

Fails loudly: a request with no scripted reply left, a reply whose `check` rejects the
request, or an unknown route gets HTTP 500/404 with the reason in the body *and* lands in
`.errors`, which `assert_all_consumed()` raises on.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from aiohttp import web
from loguru import logger

from vixio.testing.loopback import LoopbackServer

RequestCheck = Callable[[dict[str, Any]], None]
"""Gets the request body; raises AssertionError when the request is not what the test expects."""


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """One tool call the scripted model makes."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    """A dict is sent as JSON; a string is sent verbatim (to test invalid JSON)."""
    call_id: str | None = None
    """Defaults to `call_<request number>_<index>`."""

    def arguments_json(self) -> str:
        """The arguments as the model would write them."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


Fault = Literal["reset", "stall", "malformed"]
"""How a streamed reply goes wrong: "reset" closes the TCP connection mid-body, "stall" stops
sending (the connection stays open until the client gives up or the server stops), "malformed"
sends an SSE event whose data is not JSON."""


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answers to one request. Build with the class methods."""

    deltas: tuple[str, ...] = ()
    """Reply text, one SSE chunk per delta (joined for `stream: false`)."""
    calls: tuple[ScriptedToolCall, ...] = ()
    status: int = 200
    error_message: str = ""
    delay: float = 0.0
    """Seconds before the response starts (to test timeouts and cancelling a silent model)."""
    delta_delay: float = 0.0
    """Seconds between streamed chunks (to test cancelling a slow stream)."""
    check: RequestCheck | None = None
    fault: Fault | None = None
    """Streamed replies only: what goes wrong after `fault_after` text deltas (see `Fault`)."""
    fault_after: int = 0
    """Text deltas sent before the fault."""

    @classmethod
    def text(
        cls, text: str, *, delay: float = 0.0, delta_delay: float = 0.0, check: RequestCheck | None = None
    ) -> Reply:
        """A text answer, streamed a word or a few characters at a time."""
        return cls(deltas=split_deltas(text), delay=delay, delta_delay=delta_delay, check=check)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        call_id: str | None = None,
        text: str = "",
        check: RequestCheck | None = None,
    ) -> Reply:
        """One tool call (optionally after some text), finish_reason "tool_calls"."""
        call = ScriptedToolCall(name, {} if arguments is None else arguments, call_id)
        return cls(deltas=split_deltas(text), calls=(call,), check=check)

    @classmethod
    def tool_calls(cls, *calls: ScriptedToolCall, check: RequestCheck | None = None) -> Reply:
        """Several tool calls in one answer (parallel tool calls)."""
        return cls(calls=tuple(calls), check=check)

    @classmethod
    def error(cls, status: int = 500, message: str = "scripted failure", *, delay: float = 0.0) -> Reply:
        """An HTTP error with an OpenAI-style error body."""
        return cls(status=status, error_message=message, delay=delay)

    @classmethod
    def hang(cls) -> Reply:
        """Never answer (until the server stops)."""
        return cls(delay=float("inf"))

    @classmethod
    def empty(cls) -> Reply:
        """A well-formed answer with no text and no tool call (finish_reason "stop")."""
        return cls()

    @classmethod
    def faulty(cls, fault: Fault, text: str = "", *, after: int = 0, delta_delay: float = 0.0) -> Reply:
        """Stream the first `after` deltas of `text`, then fail as `fault` says."""
        return cls(deltas=split_deltas(text), fault=fault, fault_after=after, delta_delay=delta_delay)


def split_deltas(text: str) -> tuple[str, ...]:
    """Split text the way models stream it: a word with its trailing space, or 4 characters of
    text without spaces (Chinese), so a test sees several deltas for any non-trivial text."""
    pieces: list[str] = []
    for word in re.findall(r"\S+\s*|\s+", text):
        if len(word) > 8:
            pieces.extend(word[i : i + 4] for i in range(0, len(word), 4))
        else:
            pieces.append(word)
    return tuple(pieces)


class ScriptedLLMServer(LoopbackServer):
    """An aiohttp server speaking `POST /v1/chat/completions`, answering from a reply queue."""

    label = "scripted LLM server"

    def __init__(self, *replies: Reply, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self._replies: deque[Reply] = deque(replies)
        self._closing = asyncio.Event()
        self.requests: list[dict[str, Any]] = []
        """Every request body received, in order (including rejected ones)."""
        self.errors: list[str] = []
        """Why requests were rejected; `assert_all_consumed()` fails if any."""
        self.aborted_streams = 0
        """Streams the client closed before the last chunk (e.g. a cancelled run)."""
        self.faults_served = 0
        """Scripted faults (`Reply.faulty`) that were acted out."""
        self.rule: Callable[[dict[str, Any]], Reply | None] | None = None
        """Answers a request (its body) by a fixed rule, before the queue; None falls through to it."""

    # --- lifecycle ----------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        # vixio warms its pool with a HEAD (providers/prewarm.py): answered as an API server does.
        app.router.add_route("HEAD", "/v1/chat/completions", _method_not_allowed)
        app.router.add_route("*", "/{tail:.*}", self._unknown_route)
        return app

    async def stop(self) -> None:
        """Stop listening and release hanging handlers (they wait on `_closing`, so the short
        shutdown timeout never cuts a live answer)."""
        self._closing.set()
        await super().stop()

    # --- script and assertions ----------------------------------------------------------------

    def expect(self, *replies: Reply) -> Self:
        """Queue replies for the next requests, in order."""
        self._replies.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Replies not yet used."""
        return len(self._replies)

    def assert_all_consumed(self) -> None:
        """Fail if a request was rejected or a scripted reply was never requested."""
        problems = list(self.errors)
        if self._replies:
            problems.append(f"{len(self._replies)} scripted repl(ies) never requested")
        assert not problems, "scripted LLM server: " + "; ".join(problems)

    def messages(self, request: int = -1) -> list[dict[str, Any]]:
        """The `messages` of one recorded request (default: the last)."""
        return list(self.requests[request].get("messages", []))

    def tool_names(self, request: int = -1) -> list[str]:
        """Names of the tools offered in one recorded request."""
        return [t["function"]["name"] for t in self.requests[request].get("tools") or []]

    # --- HTTP ---------------------------------------------------------------------------------

    def _reject(self, status: int, reason: str) -> web.Response:
        self.errors.append(reason)
        logger.error("scripted LLM server: {}", reason)
        body = {"error": {"message": reason, "type": "scripted_server_error", "code": status}}
        return web.json_response(body, status=status)

    async def _unknown_route(self, request: web.Request) -> web.Response:
        return self._reject(404, f"unexpected route {request.method} {request.path}")

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError as exc:
            return self._reject(400, f"request body is not JSON: {exc}")
        self.requests.append(body)
        number = len(self.requests)
        ruled = self.rule(body) if self.rule is not None else None
        if ruled is not None:
            self._replies.appendleft(ruled)
        if not self._replies:
            last = body.get("messages", [{}])[-1] if body.get("messages") else {}
            reason = f"unexpected request #{number}: no scripted reply left (last message: {last})"
            return self._reject(500, reason)
        reply = self._replies.popleft()
        if reply.check is not None:
            try:
                reply.check(body)
            except AssertionError as exc:
                return self._reject(500, f"request #{number} failed its check: {exc}")
        if reply.delay and await self._sleep_unless_closing(reply.delay):
            return web.json_response({"error": {"message": "server stopping"}}, status=503)
        if reply.status != 200:
            body_ = {"error": {"message": reply.error_message, "type": "server_error", "code": reply.status}}
            return web.json_response(body_, status=reply.status)
        if body.get("stream"):
            return await self._stream(request, body, reply, number)
        return web.json_response(_completion(body, reply, number))

    async def _sleep_unless_closing(self, seconds: float) -> bool:
        """Sleep; True when the server started stopping meanwhile."""
        try:
            await asyncio.wait_for(self._closing.wait(), None if seconds == float("inf") else seconds)
        except TimeoutError:
            return False
        return True

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: Reply, number: int
    ) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        chunks = list(_stream_chunks(body, reply, number))
        if reply.fault is not None:
            chunks = chunks[: 1 + reply.fault_after]  # the role chunk, then the text before the fault
        try:
            for n, chunk in enumerate(chunks):
                if n and reply.delta_delay and await self._sleep_unless_closing(reply.delta_delay):
                    break
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            else:
                if reply.fault is not None:
                    return await self._fail_stream(request, response, reply.fault)
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
        except (ConnectionResetError, asyncio.CancelledError):
            self.aborted_streams += 1
            raise
        self.aborted_streams += 1
        return response

    async def _fail_stream(
        self, request: web.Request, response: web.StreamResponse, fault: Fault
    ) -> web.StreamResponse:
        self.faults_served += 1
        if fault == "malformed":
            await response.write(b'data: {"id": "chatcmpl-broken", "choices": [{"delta": {"content": "Hel\n\n')
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        elif fault == "stall":
            await self._closing.wait()
        else:  # "reset": no terminating chunk, the socket just goes away
            assert request.transport is not None
            request.transport.abort()
        return response


def _call_id(call: ScriptedToolCall, number: int, index: int) -> str:
    return call.call_id or f"call_{number}_{index}"


def _envelope(body: dict[str, Any], number: int, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": kind,
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
    }


def _stream_chunks(body: dict[str, Any], reply: Reply, number: int) -> Sequence[dict[str, Any]]:
    """The SSE chunks of one streamed answer, shaped like OpenAI's."""
    deltas: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant", "content": ""}, None)]
    deltas += [({"content": text}, None) for text in reply.deltas]
    for index, call in enumerate(reply.calls):
        head = {
            "index": index,
            "id": _call_id(call, number, index),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        deltas.append(({"tool_calls": [head]}, None))
        arguments = call.arguments_json()
        step = max(1, -(-len(arguments) // 3))  # three fragments, as real models split them
        for i in range(0, len(arguments), step):
            fragment = {"index": index, "function": {"arguments": arguments[i : i + step]}}
            deltas.append(({"tool_calls": [fragment]}, None))
    deltas.append(({}, "tool_calls" if reply.calls else "stop"))
    chunks = [
        {
            **_envelope(body, number, "chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        for delta, finish in deltas
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        envelope = _envelope(body, number, "chat.completion.chunk")
        chunks.append({**envelope, "choices": [], "usage": _usage(reply)})
    return chunks


def _completion(body: dict[str, Any], reply: Reply, number: int) -> dict[str, Any]:
    """The JSON of a non-streamed answer."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.deltas) or None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": _call_id(c, number, i),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json()},
            }
            for i, c in enumerate(reply.calls)
        ]
    finish = "tool_calls" if reply.calls else "stop"
    return {
        **_envelope(body, number, "chat.completion"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(reply),
    }


def _usage(reply: Reply) -> dict[str, int]:
    completion = len(reply.deltas) + sum(len(c.arguments_json()) // 4 + 1 for c in reply.calls)
    return {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}


async def _method_not_allowed(request: web.Request) -> web.Response:
    return web.Response(status=405, text="Method Not Allowed")
