"""`mcp/registerTools` clients (docs/tool-systems.md §3) against the real server, plus the pure parts alone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.core.chunk import AudioChunk, Chunk, InterruptChunk, StreamCompleteChunk, TextChunk, ThoughtChunk
from vixio.core.pipeline import Pipeline
from vixio.core.protocol import ProtocolError
from vixio.core.station import Station
from vixio.core.tools import ToolCallRequest, ToolDefinition, ToolExecutor, ToolSet
from vixio.testing.register_client import ClientTool, RegisterClient, ToolFailure
from vixio.transports.xiaozhi.mcp.ai_messages import join_sentences
from vixio.transports.xiaozhi.mcp.register_tools import RegisterToolsClient, parse_tools
from vixio.transports.xiaozhi.protocol import messages as xp
from vixio.transports.xiaozhi.websocket.transport import DeviceContext

from .conftest import tone, ws_url

pytestmark = pytest.mark.integration

VOLUME_SCHEMA = {"type": "object", "properties": {"level": {"type": "integer"}}, "required": ["level"]}


class ThinkingReply(Station):
    """Answers user text with a thought, two spoken sentences, a little audio, then complete."""

    handles = (TextChunk,)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        assert isinstance(chunk, TextChunk)
        yield chunk
        if chunk.role != "user":
            return
        yield ThoughtChunk(text=f"the user said {chunk.text}")
        yield TextChunk(text=f"You said: {chunk.text}.", role="assistant")
        yield TextChunk(text="That is all.", role="assistant")
        yield AudioChunk(pcm=tone(0.2), sample_rate=22050, role="assistant")
        yield StreamCompleteChunk(source=self.name)


class Harness:
    def __init__(self, server: VixioServer, tools_seen: dict[str, list[list[ToolDefinition]]]) -> None:
        self.server = server
        self.tools_seen = tools_seen

    @property
    def url(self) -> str:
        return ws_url(self.server)

    def register_client(self, client: RegisterClient) -> RegisterToolsClient:
        assert client.server_hello is not None
        return self.server.transport.register_clients[client.server_hello["session_id"]]

    async def tools(self, client: RegisterClient, count: int = 1, timeout: float = 3.0) -> list[ToolDefinition]:
        """The `count`-th tool list the pipeline's callback heard for this client's session."""
        assert client.server_hello is not None
        session_id = client.server_hello["session_id"]
        await until(lambda: len(self.tools_seen.get(session_id, [])) >= count, timeout)
        return self.tools_seen[session_id][count - 1]


async def until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def start_harness(**xiaozhi: Any) -> Harness:
    """A real server whose sessions answer with ThinkingReply and record their tool lists;
    `xiaozhi` adds or overrides transport settings (e.g. `pairing={"trust_mac": True}`)."""
    tools_seen: dict[str, list[list[ToolDefinition]]] = {}

    async def factory(context: DeviceContext) -> Pipeline:
        async def on_tools(defs: list[Any]) -> None:
            tools_seen.setdefault(context.session_id, []).append(list(defs))

        context.transport.set_device_tools_callback(context.session_id, on_tools)
        return Pipeline([ThinkingReply()], session_id=context.session_id)

    config = VixioConfig.model_validate(
        {
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "http": {"host": "127.0.0.1", "port": 0},
                "idle_timeout": 0,
                **xiaozhi,
            },
        }
    )
    server = VixioServer(config, factory)
    await server.start()
    return Harness(server, tools_seen)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    harness = await start_harness()
    yield harness
    await harness.server.stop()


def volume_tools(
    *, control_delay: float = 0.0, query: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
) -> list[ClientTool]:
    async def set_volume(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(control_delay)
        return {"status": "success", "message": f"volume set to {args['level']}"}

    async def get_weather(args: dict[str, Any]) -> Any:
        return {"city": args.get("city"), "weather": "sunny"}

    return [
        ClientTool("amplify_volume", "Set the device volume", VOLUME_SCHEMA, set_volume, sub_type="control"),
        ClientTool(
            "get_weather",
            "Weather of a city",
            {"type": "object", "properties": {"city": {"type": "string"}}},
            query or get_weather,
        ),
    ]


# --- registration --------------------------------------------------------------------------------


@pytest.mark.parametrize("envelope", ["mcp", "bare"])
async def test_registration_is_answered_with_the_clients_id_in_its_own_envelope(harness: Harness, envelope) -> None:
    async with RegisterClient(harness.url, volume_tools(), envelope=envelope) as client:
        reply = await client.register(mac_addr="AA-BB-CC-DD-EE-FF", request_id="client-reg-001")
        message = reply["result"].pop("message")
        pairing_id = reply["result"].pop("pairing_id")
        assert reply == {
            "jsonrpc": "2.0",
            "id": "client-reg-001",
            "result": {"status": "registered", "tools": 2, "paired": False, "pairing": "pending_approval"},
        }
        # Naming a MAC without the device's token: the client is told it waits for an operator.
        assert (
            message.startswith(
                "Tools were successfully registered. Not paired with aa:bb:cc:dd:ee:ff: pairing "
                "awaits an operator's approval"
            )
            and pairing_id in message
        )
        assert client.envelopes_seen == {envelope}
        server_side = harness.register_client(client)
        assert server_side.mac_addr == "AA-BB-CC-DD-EE-FF" and server_side.envelope == envelope


async def test_tools_reach_the_callback_as_register_tools_and_a_second_registration_replaces_them(
    harness: Harness,
) -> None:
    async with RegisterClient(harness.url, volume_tools()) as client:
        await client.register()
        tools = await harness.tools(client)
        assert [(t.name, t.source, t.sub_type) for t in tools] == [
            ("amplify_volume", "register", "control"),
            ("get_weather", "register", "query"),
        ]
        assert tools[0].parameters == VOLUME_SCHEMA
        assert tools[0].client is harness.register_client(client)

        reply = await client.register(tools=[{"name": "blink", "description": "Blink the LED"}])
        assert reply["result"]["tools"] == 1
        (blink,) = await harness.tools(client, count=2)
        # The defaults: remote, query, an empty object schema.
        assert (blink.name, blink.sub_type, blink.parameters) == (
            "blink",
            "query",
            {"type": "object", "properties": {}},
        )


async def test_a_registration_sent_before_the_hello_is_kept_and_delivered_once_the_pipeline_exists(
    harness: Harness,
) -> None:
    client = RegisterClient(harness.url, volume_tools())
    await client.connect(hello=False)
    try:
        reply = await client.register()  # answered before any hello
        assert reply["result"]["status"] == "registered"
        await client.send_hello()
        await client.wait_for_message("hello")
        tools = await harness.tools(client)
        assert {t.name for t in tools} == {"amplify_volume", "get_weather"}
        await asyncio.sleep(0.2)
        assert len(harness.tools_seen[client.server_hello["session_id"]]) == 1  # delivered once
    finally:
        await client.close()


async def test_malformed_registration_gets_an_error_and_bad_entries_are_skipped_not_fatal(harness: Harness) -> None:
    async with RegisterClient(harness.url, volume_tools()) as client:
        for params in ({"mac_addr": "AA"}, [1, 2], {"tools": "all of them"}):
            reply = await client.register(params=params)
            assert reply["error"]["code"] == -32602 and "tools" in reply["error"]["message"]
        good = volume_tools()[0].to_json()
        reply = await client.register(
            tools=[
                good,
                {"name": 7, "description": "x"},
                {"name": "maybe", "description": "d", "sub_type": "sometimes"},
                {"name": "server_side", "description": "d", "main_type": "local"},
                {"name": "bad_schema", "description": "d", "parameters": {"type": "array"}},
                dict(good),
            ]
        )
        result = reply["result"]
        assert result["status"] == "registered" and result["tools"] == 1
        assert [(s["index"], s["name"]) for s in result["skipped"]] == [
            (1, ""),
            (2, "maybe"),
            (3, "server_side"),
            (4, "bad_schema"),
            (5, "amplify_volume"),
        ]
        assert "sub_type" in result["skipped"][1]["reason"] and "local" in result["skipped"][2]["reason"]
        assert "Registered 1 of 6 tools" in result["message"]
        assert [t.name for t in await harness.tools(client)] == ["amplify_volume"]
        # The session is alive and still a conversation.
        await client.send_text("still there")
        assert (await client.wait_for_message("stt"))["text"] == "still there"


# --- calls ---------------------------------------------------------------------------------------


async def test_call_tool_waits_for_the_clients_result(harness: Harness) -> None:
    async def slow_weather(args: dict[str, Any]) -> Any:
        await asyncio.sleep(0.3)
        return {"city": args["city"], "weather": "晴"}

    async with RegisterClient(harness.url, volume_tools(query=slow_weather)) as client:
        await client.register()
        weather = (await harness.tools(client))[1]
        started = time.monotonic()
        result = await weather.invoke({"city": "北京"})
        assert time.monotonic() - started >= 0.3
        assert result.success and result.text == '{"city":"北京","weather":"晴"}'
        (execution,) = client.executions
        assert execution.tool_input == {"city": "北京"}
        assert isinstance(execution.id, str) and execution.id.startswith("vixio-")


async def test_string_results_are_passed_as_they_are_and_ids_are_unique(harness: Harness) -> None:
    async with RegisterClient(harness.url, volume_tools(query=lambda args: "plain text")) as client:
        await client.register()
        weather = (await harness.tools(client))[1]
        results = await asyncio.gather(*(weather.invoke({}) for _ in range(3)))
        assert [r.text for r in results] == ["plain text"] * 3
        assert len({e.id for e in client.executions}) == 3


async def test_an_error_result_fails_the_call_with_code_and_message(harness: Harness) -> None:
    def refuse(args: dict[str, Any]) -> Any:
        raise ToolFailure("执行失败：音量级别超出范围（0-100）。", code=-32001)

    async with RegisterClient(harness.url, volume_tools(query=refuse)) as client:
        await client.register()
        result = await (await harness.tools(client))[1].invoke({})
        assert not result.success
        assert "-32001" in result.text and "超出范围" in result.text


async def test_a_control_tool_is_answered_success_at_once_while_the_client_is_slow(harness: Harness) -> None:
    async with RegisterClient(harness.url, volume_tools(control_delay=1.0)) as client:
        await client.register()
        toolset = ToolSet()
        toolset.set_tools("register", await harness.tools(client))
        executor = ToolExecutor(toolset)
        started = time.monotonic()
        result = await executor.execute(
            ToolCallRequest(call_id="c1", tool_name="amplify_volume", arguments={"level": "80"})
        )
        assert time.monotonic() - started < 0.5
        assert result.success and result.text == "success"
        execution = await client.wait_for_execution("amplify_volume")
        assert execution.tool_input == {"level": 80}  # coerced to the registered schema
        assert not execution.answered.is_set()
        await asyncio.wait_for(execution.answered.wait(), 3)
        # A query tool through the same executor waits for the real result.
        query = await executor.execute(
            ToolCallRequest(call_id="c2", tool_name="get_weather", arguments={"city": "Paris"})
        )
        assert query.text == '{"city":"Paris","weather":"sunny"}'
        await executor.close()


async def test_disconnecting_mid_call_fails_the_call_promptly(harness: Harness) -> None:
    async def hang(args: dict[str, Any]) -> Any:
        await asyncio.Event().wait()

    client = RegisterClient(harness.url, volume_tools(query=hang))
    await client.connect()
    await client.register()
    weather = (await harness.tools(client))[1]
    call = asyncio.create_task(weather.invoke({}))
    await client.wait_for_execution("get_weather")
    started = time.monotonic()
    await client.close()
    result = await asyncio.wait_for(call, 3)
    assert time.monotonic() - started < 1.0  # not the 30 s call timeout
    assert not result.success and "disconnected" in result.text


async def test_an_unanswered_call_times_out(harness: Harness) -> None:
    async def hang(args: dict[str, Any]) -> Any:
        await asyncio.Event().wait()

    async with RegisterClient(harness.url, volume_tools(query=hang)) as client:
        await client.register()
        harness.register_client(client).call_timeout = 0.2
        result = await (await harness.tools(client))[1].invoke({})
        assert not result.success and "did not answer within 0.2 s" in result.text


# --- mcp/ai/message ------------------------------------------------------------------------------


async def test_the_assistants_reply_streams_as_ai_messages_beside_the_normal_messages(harness: Harness) -> None:
    async with RegisterClient(harness.url, volume_tools(), envelope="bare") as client:
        await client.register()
        await client.send_text("hello")
        assert await client.wait_for_ai("final") == "You said: hello. That is all."
        kinds = [(m["type"], m["content"]) for m in client.ai_messages]
        assert kinds == [
            ("thought", "the user said hello"),
            ("chunk", "You said: hello."),
            ("chunk", " That is all."),
            ("final", "You said: hello. That is all."),
        ]
        # Fragments of a stream: concatenated, they are the final text exactly.
        assert "".join(c for k, c in kinds if k == "chunk") == kinds[-1][1]
        assert client.envelopes_seen == {"bare"}
        # The Xiaozhi messages go on as before.
        sentence = await client.wait_for_message("tts", state="sentence_start")
        assert sentence["text"] == "You said: hello."
        await client.wait_for_message("tts", state="stop")


async def test_a_client_that_did_not_register_gets_no_ai_messages(harness: Harness) -> None:
    async with RegisterClient(harness.url) as client:
        await client.send_text("hello")
        await client.wait_for_message("tts", state="stop")
        assert client.ai_messages == []


# --- the pure parts ------------------------------------------------------------------------------


def test_bare_jsonrpc_frames_decode_as_mcp_and_encode_back_bare() -> None:
    protocol = xp.XiaozhiProtocol(1)
    payload = {"jsonrpc": "2.0", "method": "mcp/registerTools", "params": {"tools": []}, "id": "r1"}
    message = protocol.decode(json.dumps(payload))
    assert protocol.is_mcp_message(message) and protocol.get_mcp_payload(message) == payload
    assert xp.mcp_envelope(message) == "bare"
    assert json.loads(protocol.encode(message)) == payload
    wrapped = protocol.decode(json.dumps({"type": "mcp", "payload": payload}))
    assert xp.mcp_envelope(wrapped) == "mcp"
    assert json.loads(protocol.encode(wrapped)) == {"type": "mcp", "payload": payload}
    for junk in ({"no": "type"}, {"jsonrpc": "1.0", "method": "x"}):
        with pytest.raises(ProtocolError):
            protocol.decode(json.dumps(junk))


def test_parse_tools_fills_defaults_and_keeps_good_entries() -> None:
    tools, skipped = parse_tools(
        [
            {"name": "a", "description": "A"},
            {
                "name": "b",
                "description": "B",
                "sub_type": "control",
                "main_type": "remote",
                "inputSchema": VOLUME_SCHEMA,
            },
            "not a tool",
        ]
    )
    assert [(t.name, t.sub_type, t.source) for t in tools] == [("a", "query", "register"), ("b", "control", "register")]
    assert tools[1].parameters == VOLUME_SCHEMA
    assert skipped == [{"index": 2, "name": "", "reason": "a tool must be an object, not str"}]


def test_join_sentences_spaces_latin_text_only() -> None:
    assert join_sentences(["Hello there.", "How are you?"]) == "Hello there. How are you?"
    assert join_sentences(["北京今天天气晴朗。", "气温25摄氏度。"]) == "北京今天天气晴朗。气温25摄氏度。"


class _Wire:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], str]] = []

    async def __call__(self, payload: dict[str, Any], envelope: str) -> None:
        self.sent.append((payload, envelope))


async def _registered(wire: _Wire, **kwargs: Any) -> RegisterToolsClient:
    client = RegisterToolsClient("0123456789abcdef", wire, **kwargs)
    client.on_mcp_message(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "mcp/registerTools",
            "params": {"tools": [{"name": "t", "description": "T"}]},
        }
    )
    await until(lambda: bool(wire.sent))
    return client


async def test_an_interrupted_reply_is_closed_with_what_was_sent_and_nothing_twice() -> None:
    wire = _Wire()
    client = await _registered(wire)
    await client.on_output(TextChunk(text="First part.", role="assistant"))
    await client.on_output(TextChunk(text="ignored", role="user"))
    await client.on_output(InterruptChunk(reason="abort"))
    await client.on_output(StreamCompleteChunk(source="late"))  # nothing left to finish
    assert [(p["params"]["type"], p["params"]["content"]) for p, _ in wire.sent[1:]] == [
        ("chunk", "First part."),
        ("final", "First part."),
    ]


async def test_accepts_only_registrations_and_its_own_string_ids() -> None:
    client = RegisterToolsClient("0123456789abcdef", _Wire())
    assert client.accepts({"jsonrpc": "2.0", "id": 5, "method": "mcp/registerTools", "params": {}})
    assert client.accepts({"jsonrpc": "2.0", "id": "vixio-01234567-3", "result": {}})
    assert not client.accepts({"jsonrpc": "2.0", "id": 3, "result": {}})  # the device MCP client's
    assert not client.accepts({"jsonrpc": "2.0", "id": "vixio-other-3", "result": {}})
    assert not client.accepts({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


async def test_cancelling_a_call_re_raises_and_forgets_it() -> None:
    wire = _Wire()
    client = await _registered(wire)
    call = asyncio.create_task(client.call_tool("t", {}))
    await until(lambda: len(wire.sent) == 2)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert client._pending == {}
    late = wire.sent[1][0]["id"]
    client.on_mcp_message({"jsonrpc": "2.0", "id": late, "result": "too late"})  # logged and dropped


async def test_every_reply_gets_a_final_and_fragments_concatenate_to_it_exactly() -> None:
    wire = _Wire()
    client = await _registered(wire)

    async def reply(*chunks: Chunk) -> list[tuple[str, str]]:
        before = len(wire.sent)
        for chunk in chunks:
            await client.on_output(chunk)
        return [(p["params"]["type"], p["params"]["content"]) for p, _ in wire.sent[before:]]

    # The model said nothing: the client still learns the reply is over.
    assert await reply(TextChunk(text="hm", role="user"), StreamCompleteChunk(source="agent")) == [("final", "")]
    cjk = await reply(
        TextChunk(text="天气", role="user"),
        TextChunk(text="北京今天晴。", role="assistant"),
        TextChunk(text="气温25度。", role="assistant"),
        TextChunk(text="OK then.", role="assistant"),
        TextChunk(text="Bye.", role="assistant"),
        StreamCompleteChunk(source="agent"),
    )
    assert cjk == [
        ("chunk", "北京今天晴。"),
        ("chunk", "气温25度。"),
        ("chunk", "OK then."),
        ("chunk", " Bye."),
        ("final", "北京今天晴。气温25度。OK then. Bye."),
    ]
    assert "".join(content for kind, content in cjk[:-1]) == cjk[-1][1]
    # A StreamComplete with no turn behind it (nothing owed) sends nothing.
    assert await reply(StreamCompleteChunk(source="say")) == []
