"""A small `mcp/registerTools` client (docs/tool-systems.md §3): a robot, a web page or a test that offers tools.

It opens a Xiaozhi WebSocket session (hello, then typed text with `listen detect`), registers
its tools, runs `mcp/tool/execute` requests with their handlers and records the assistant's
`mcp/ai/message` notifications. `envelope="bare"` speaks bare JSON-RPC text frames instead of
wrapping them in `{"type": "mcp", "payload": …}`.

    tools = [ClientTool("set_volume", "Set the volume", {...}, handler, sub_type="control")]
    async with RegisterClient(url, tools) as client:
        await client.register(mac_addr="AA-BB-CC-DD-EE-FF")
        await client.send_text("turn it up")
        print(await client.wait_for_ai("final"))

On the command line: `python -m vixio.testing.register_client ws://127.0.0.1:8000/xiaozhi/v1/ --text hello`.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from loguru import logger
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

ToolHandler = Callable[[dict[str, Any]], Any | Awaitable[Any]]


class ToolFailure(Exception):
    """Raise in a handler to answer with a JSON-RPC error of your own code."""

    def __init__(self, message: str, code: int = -32000) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class ClientTool:
    """A tool the client offers; `handler` gets `tool_input` and may be async and slow."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    sub_type: Literal["control", "query"] = "query"
    main_type: Literal["remote", "local"] = "remote"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "main_type": self.main_type,
            "sub_type": self.sub_type,
            "parameters": self.parameters,
        }


@dataclass
class Execution:
    """One `mcp/tool/execute` the server sent, and how it was answered."""

    id: Any
    tool_name: str
    tool_input: dict[str, Any]
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    reply: dict[str, Any] | None = None


class RegisterClient:
    """One client session; see the module docstring."""

    def __init__(
        self,
        url: str,
        tools: list[ClientTool] | None = None,
        *,
        envelope: Literal["mcp", "bare"] = "mcp",
        device_id: str = "",
        client_id: str = "",
        token: str = "",
    ) -> None:
        self.url = url
        self.tools = {tool.name: tool for tool in tools or []}
        self.envelope = envelope
        self.device_id = device_id or "aa:bb:cc:" + ":".join(uuid.uuid4().hex[i : i + 2] for i in (0, 2, 4))
        # A companion keeps its Client-Id: the same Device-Id with another one is another client to the server.
        self.client_id = client_id or str(uuid.uuid5(uuid.NAMESPACE_URL, f"vixio-register-client:{self.device_id}"))
        self.token = token
        """This client's own handshake token (`Authorization: Bearer`), for servers with auth on."""
        self.server_hello: dict[str, Any] | None = None
        self.messages: list[dict[str, Any]] = []
        """Every non-MCP JSON message from the server (hello, stt, tts, llm ...)."""
        self.ai_messages: list[dict[str, Any]] = []
        """`params` of every `mcp/ai/message`: {"type": "chunk"|"thought"|"final", "content": ...}."""
        self.pairing_notices: list[dict[str, Any]] = []
        """`params` of every `mcp/pairing` notification (an operator approved or unpaired this companion)."""
        self.executions: list[Execution] = []
        self.envelopes_seen: set[str] = set()
        """How the server framed the JSON-RPC it sent: "mcp" (wrapped) and/or "bare"."""
        self.audio_frames = 0
        self._ws: ClientConnection | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._pending: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._log = logger.bind(component="RegisterClient", device=self.device_id)

    async def __aenter__(self) -> RegisterClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- session ------------------------------------------------------------------------------

    async def connect(self, *, hello: bool = True, timeout: float = 5.0) -> dict[str, Any] | None:
        """Open the socket and (by default) exchange hellos; returns the server's hello."""
        headers = {"Device-Id": self.device_id, "Client-Id": self.client_id, "Protocol-Version": "1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._ws = await connect(self.url, additional_headers=headers)
        self._receiver = asyncio.create_task(self._receive(), name="register-client-receive")
        if hello:
            await self.send_hello()
            return await self.wait_for_message("hello", timeout=timeout)
        return None

    async def send_hello(self) -> None:
        await self.send_json(
            {
                "type": "hello",
                "version": 1,
                "transport": "websocket",
                "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
            }
        )

    async def send_text(self, text: str) -> None:
        """A typed user utterance (`listen detect` with text, as test clients send it)."""
        await self.send_json({"type": "listen", "state": "detect", "text": text})

    async def send_json(self, message: dict[str, Any]) -> None:
        if self._ws is None:
            raise RuntimeError("not connected")
        await self._ws.send(json.dumps(message, ensure_ascii=False))

    async def send_jsonrpc(self, payload: dict[str, Any]) -> None:
        """A JSON-RPC payload in this client's envelope."""
        await self.send_json(payload if self.envelope == "bare" else {"type": "mcp", "payload": payload})

    async def close(self) -> None:
        for task in self._handlers:
            task.cancel()
        if self._ws is not None:
            await self._ws.close()
        if self._receiver is not None:
            await asyncio.gather(self._receiver, return_exceptions=True)
        self._ws = None

    # --- registerTools ------------------------------------------------------------------------

    async def register(
        self,
        *,
        mac_addr: str = "AA-BB-CC-DD-EE-FF",
        tools: list[dict[str, Any]] | None = None,
        request_id: Any = None,
        params: Any = None,
        timeout: float = 5.0,
        device_token: str = "",
        device_client_id: str = "",
    ) -> dict[str, Any]:
        """Send `mcp/registerTools` and return the server's reply payload (result or error).
        `tools` overrides this client's tool list (raw entries, to test bad ones); `params`
        overrides the whole params value. `device_token` and `device_client_id`: the named
        device's own credential (its OTA token and Client-Id), which pairs without approval."""
        request_id = f"client-reg-{next(self._ids):03d}" if request_id is None else request_id
        if params is None:
            entries = tools if tools is not None else [tool.to_json() for tool in self.tools.values()]
            params = {"mac_addr": mac_addr, "tools": entries}
            if device_token:
                params.update(token=device_token, client_id=device_client_id)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self.send_jsonrpc({"jsonrpc": "2.0", "method": "mcp/registerTools", "params": params, "id": request_id})
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(request_id, None)

    # --- waiting ------------------------------------------------------------------------------

    async def wait_for_ai(self, kind: str, *, count: int = 1, timeout: float = 5.0) -> str:
        """Content of the `count`-th `mcp/ai/message` of type `kind`."""
        await self._wait(lambda: len([m for m in self.ai_messages if m.get("type") == kind]) >= count, timeout)
        content: str = [m for m in self.ai_messages if m.get("type") == kind][count - 1]["content"]
        return content

    async def wait_for_pairing(self, status: str, *, timeout: float = 5.0) -> dict[str, Any]:
        """The first `mcp/pairing` notification with this status."""
        await self._wait(lambda: any(n.get("status") == status for n in self.pairing_notices), timeout)
        return next(n for n in self.pairing_notices if n.get("status") == status)

    async def wait_for_execution(self, tool_name: str, *, timeout: float = 5.0) -> Execution:
        await self._wait(lambda: any(e.tool_name == tool_name for e in self.executions), timeout)
        return next(e for e in self.executions if e.tool_name == tool_name)

    async def wait_for_message(self, kind: str, *, timeout: float = 5.0, **fields: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next(
                (m for m in self.messages if m.get("type") == kind and all(m.get(k) == v for k, v in fields.items())),
                None,
            )

        await self._wait(lambda: found() is not None, timeout)
        return found()  # type: ignore[return-value]

    async def wait_closed(self, timeout: float = 5.0) -> None:
        if self._receiver is not None:
            await asyncio.wait_for(asyncio.shield(self._receiver), timeout)

    async def _wait(self, predicate: Callable[[], bool], timeout: float) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    # --- receiving ----------------------------------------------------------------------------

    async def _receive(self) -> None:
        assert self._ws is not None
        try:
            async for frame in self._ws:
                if isinstance(frame, bytes):
                    self.audio_frames += 1
                    continue
                try:
                    message = json.loads(frame)
                except ValueError:
                    self._log.warning("server sent a frame that is not JSON: {!r}", frame[:80])
                    continue
                await self._on_message(message)
        except ConnectionClosed:
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("the server closed the connection"))
            async with self._changed:
                self._changed.notify_all()

    async def _on_message(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        if message.get("type") == "mcp":
            self.envelopes_seen.add("mcp")
            await self._on_jsonrpc(message.get("payload"))
        elif "type" not in message and "jsonrpc" in message:
            self.envelopes_seen.add("bare")
            await self._on_jsonrpc(message)
        else:
            self.messages.append(message)
            if message.get("type") == "hello":
                self.server_hello = message
        async with self._changed:
            self._changed.notify_all()

    async def _on_jsonrpc(self, payload: Any) -> None:
        if not isinstance(payload, dict):
            return
        method = payload.get("method")
        if method == "mcp/ai/message":
            self.ai_messages.append(payload.get("params") or {})
        elif method == "mcp/pairing":
            self.pairing_notices.append(payload.get("params") or {})
        elif method == "mcp/tool/execute":
            params = payload.get("params") or {}
            execution = Execution(payload.get("id"), str(params.get("tool_name")), params.get("tool_input") or {})
            self.executions.append(execution)
            task = asyncio.create_task(self._execute(execution), name=f"register-client-{execution.tool_name}")
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        elif method is not None:
            if "id" in payload:  # e.g. device-MCP `initialize`: not spoken here
                await self.send_jsonrpc(
                    {
                        "jsonrpc": "2.0",
                        "id": payload["id"],
                        "error": {"code": -32601, "message": f"method not found: {method}"},
                    }
                )
        else:
            future = self._pending.get(payload.get("id"))
            if future is not None and not future.done():
                future.set_result(payload)

    async def _execute(self, execution: Execution) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": execution.id}
        tool = self.tools.get(execution.tool_name)
        try:
            if tool is None:
                raise ToolFailure(f"unknown tool {execution.tool_name}", -32601)
            value = tool.handler(execution.tool_input)
            reply["result"] = await value if inspect.isawaitable(value) else value
        except ToolFailure as exc:
            reply["error"] = {"code": exc.code, "message": exc.message}
        except Exception as exc:  # a handler's bug is reported to the server, not raised
            reply["error"] = {"code": -32000, "message": f"{type(exc).__name__}: {exc}"}
        execution.reply = reply
        execution.answered.set()
        try:
            await self.send_jsonrpc(reply)
        except ConnectionClosed:
            pass


# --- command line -------------------------------------------------------------------------------


def demo_tools() -> list[ClientTool]:
    """Two tools in the shape of the registerTools design's examples: a control tool and a query tool."""
    state = {"level": 50}

    def set_volume(args: dict[str, Any]) -> dict[str, Any]:
        state["level"] = int(args.get("level", state["level"]))
        return {"status": "success", "message": f"volume set to {state['level']}"}

    return [
        ClientTool(
            "amplify_volume",
            "Set the device volume (0-100).",
            {
                "type": "object",
                "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 100}},
                "required": ["level"],
            },
            set_volume,
            sub_type="control",
        ),
        ClientTool(
            "get_volume",
            "Read the current device volume.",
            {"type": "object", "properties": {}},
            lambda args: {"level": state["level"]},
        ),
    ]


async def _main(args: argparse.Namespace) -> None:
    async with RegisterClient(args.url, demo_tools(), envelope=args.envelope) as client:
        print("registered:", (await client.register(mac_addr=args.mac)).get("result"))
        for text in args.text:
            finals = sum(m.get("type") == "final" for m in client.ai_messages)
            await client.send_text(text)
            print("assistant:", await client.wait_for_ai("final", count=finals + 1, timeout=args.timeout))
        for execution in client.executions:
            print("executed:", execution.tool_name, execution.tool_input, "->", execution.reply)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="An mcp/registerTools client with two demo tools.")
    parser.add_argument("url", help="the server's WebSocket URL, e.g. ws://127.0.0.1:8000/xiaozhi/v1/")
    parser.add_argument("--text", action="append", default=[], help="a user utterance (repeatable)")
    parser.add_argument("--envelope", choices=("mcp", "bare"), default="mcp")
    parser.add_argument("--mac", default="AA-BB-CC-DD-EE-FF")
    parser.add_argument("--timeout", type=float, default=30.0)
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
