"""TransportBase through a real subclass speaking JSON over in-memory pipes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from vixio.core import transport as core_transport
from vixio.core.chunk import Chunk, TextChunk
from vixio.core.protocol import Message, ProtocolBase, ProtocolError
from vixio.core.transport import ConnectionClosed, TransportBase

pytestmark = pytest.mark.unit


class JsonProtocol(ProtocolBase):
    def decode(self, data: bytes | str) -> Message:
        try:
            message = json.loads(data)
        except ValueError as exc:
            raise ProtocolError(f"not JSON: {exc}") from exc
        if not isinstance(message, dict):
            raise ProtocolError("not an object")
        return message

    def encode(self, message: Message) -> str:
        return json.dumps(message)

    def message_to_chunk(self, message: Message, session_id: str, turn_id: int) -> Chunk | None:
        if message.get("type") == "text":
            return TextChunk(text=message["text"], role="user", session_id=session_id, turn_id=turn_id)
        return None

    def chunk_to_messages(self, chunk: Chunk) -> list[Message]:
        return [{"type": "text", "text": chunk.text}] if isinstance(chunk, TextChunk) else []


class PipeTransport(TransportBase):
    """One in-memory connection per session: `incoming` feeds reads, `sent` records writes."""

    def __init__(self) -> None:
        super().__init__(JsonProtocol(), queue_size=4)
        self.incoming: dict[str, asyncio.Queue[str | None]] = {}
        self.sent: dict[str, list[str]] = {}

    async def start(self) -> None: ...

    async def stop(self) -> None:
        for session_id in list(self.incoming):
            await self.close_session_io(session_id)

    def connect(self, session_id: str) -> None:
        self.incoming[session_id] = asyncio.Queue()
        self.sent[session_id] = []
        self.open_session_io(session_id, device_id="aa:bb:cc")

    async def _do_read(self, session_id: str) -> str:
        data = await self.incoming[session_id].get()
        if data is None:
            raise ConnectionClosed
        return data

    async def _do_write(self, session_id: str, data: bytes | str) -> None:
        self.sent[session_id].append(str(data))


class Peer:
    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def on_mcp_message(self, payload: dict[str, Any]) -> None:
        self.payloads.append(payload)


async def test_mcp_bypasses_reads_and_malformed_frames_are_dropped(no_leaked_tasks) -> None:
    transport = PipeTransport()
    transport.connect("s")
    peer = Peer()
    transport.set_mcp_peer("s", peer)
    feed = transport.incoming["s"]
    for frame in [
        "{not json",
        json.dumps({"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 1, "result": {}}}),
        "[1, 2]",
        json.dumps({"type": "text", "text": "hello"}),
        None,
    ]:
        feed.put_nowait(frame)
    assert await transport.read("s") == {"type": "text", "text": "hello"}
    assert await transport.read("s") is None  # closed
    assert peer.payloads == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    await transport.stop()


async def test_write_and_send_mcp_go_out_encoded_in_order(no_leaked_tasks) -> None:
    transport = PipeTransport()
    transport.connect("s")
    await transport.write("s", {"type": "text", "text": "a"})
    await transport.send_mcp("s", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    for _ in range(10):
        if len(transport.sent["s"]) == 2:
            break
        await asyncio.sleep(0.01)
    assert [json.loads(s)["type"] for s in transport.sent["s"]] == ["text", "mcp"]
    assert json.loads(transport.sent["s"][1])["payload"]["method"] == "tools/list"
    await transport.stop()
    assert not transport.has_session("s")


class BatchingPipeTransport(PipeTransport):
    """Records each hand-over of the write worker: one list per `_do_write` / `_do_write_batch`."""

    def __init__(self, *, closed: bool = False) -> None:
        super().__init__()
        self.closed = closed
        self.calls: list[list[str]] = []

    async def _do_write(self, session_id: str, data: bytes | str) -> None:
        self.calls.append([str(data)])
        await super()._do_write(session_id, data)

    async def _do_write_batch(self, session_id: str, frames: list[bytes | str]) -> None:
        if self.closed:
            raise ConnectionClosed(session_id)
        self.calls.append([str(data) for data in frames])
        self.sent[session_id].extend(str(data) for data in frames)


async def settle_writes(transport: PipeTransport, session_id: str, count: int) -> list[str]:
    for _ in range(50):
        if len(transport.sent[session_id]) >= count:
            break
        await asyncio.sleep(0.001)
    return [json.loads(data)["text"] for data in transport.sent[session_id]]


async def test_what_is_queued_together_is_written_together_in_order(no_leaked_tasks) -> None:
    transport = BatchingPipeTransport()
    transport.connect("s")
    for text in "abc":  # queued in one step, as the pacer queues its pair of frames
        await transport.write("s", {"type": "text", "text": text})
    assert await settle_writes(transport, "s", 3) == ["a", "b", "c"]
    await transport.write("s", {"type": "text", "text": "d"})
    assert await settle_writes(transport, "s", 4) == ["a", "b", "c", "d"]
    assert [[json.loads(data)["text"] for data in call] for call in transport.calls] == [["a", "b", "c"], ["d"]]
    await transport.stop()


async def test_a_batch_is_at_most_write_batch_messages(no_leaked_tasks, monkeypatch) -> None:
    monkeypatch.setattr(core_transport, "WRITE_BATCH", 2)
    transport = BatchingPipeTransport()
    transport.connect("s")
    for text in "abcd":
        await transport.write("s", {"type": "text", "text": text})
    assert await settle_writes(transport, "s", 4) == ["a", "b", "c", "d"]
    assert [len(call) for call in transport.calls] == [2, 2]
    await transport.stop()


async def test_by_default_a_batch_is_written_one_frame_at_a_time(no_leaked_tasks) -> None:
    transport = PipeTransport()
    transport.connect("s")
    for text in "abc":
        await transport.write("s", {"type": "text", "text": text})
    assert await settle_writes(transport, "s", 3) == ["a", "b", "c"]
    await transport.stop()


async def test_a_message_that_cannot_be_encoded_is_dropped_from_its_batch(no_leaked_tasks) -> None:
    transport = BatchingPipeTransport()
    transport.connect("s")
    await transport.write("s", {"type": "text", "text": "a"})
    await transport.write("s", {"type": "text", "text": object()})  # not JSON: logged, dropped
    await transport.write("s", {"type": "text", "text": "c"})
    assert await settle_writes(transport, "s", 2) == ["a", "c"]
    assert len(transport.calls) == 1
    await transport.stop()


async def test_a_closed_connection_ends_the_write_worker_on_a_batch_too(no_leaked_tasks) -> None:
    transport = BatchingPipeTransport(closed=True)
    transport.connect("s")
    writer = transport._io["s"].tasks[1]
    await transport.write("s", {"type": "text", "text": "a"})
    await transport.write("s", {"type": "text", "text": "b"})
    await asyncio.wait_for(writer, 1)  # returned, not failed
    assert writer.exception() is None and transport.sent["s"] == []
    await transport.stop()


class DirectPipeTransport(BatchingPipeTransport):
    """Writes at once when allowed (`direct`): each direct write is one entry of `now`."""

    def __init__(self) -> None:
        super().__init__()
        self.direct = True
        self.now: list[list[str]] = []

    def _writer_now(self, session_id: str) -> Any:
        if not self.direct:
            return None
        return lambda frames: self.now.append([json.loads(str(data))["text"] for data in frames])


async def test_with_nothing_queued_a_write_goes_out_at_once_and_write_many_in_one_write(no_leaked_tasks) -> None:
    transport = DirectPipeTransport()
    transport.connect("s")
    await transport.write("s", {"type": "text", "text": "a"})
    assert transport.now == [["a"]]  # written before write() returned: no writer task step
    await transport.write_many(
        "s", [{"type": "text", "text": "b"}, {"type": "text", "text": object()}, {"type": "text", "text": "c"}]
    )  # the middle one cannot be encoded
    assert transport.now == [["a"], ["b", "c"]] and transport.calls == []
    await transport.stop()


async def test_a_direct_write_never_overtakes_what_the_writer_holds(no_leaked_tasks) -> None:
    transport = DirectPipeTransport()
    transport.connect("s")
    transport.direct = False  # e.g. a full socket buffer: these go through the write worker
    await transport.write_many("s", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    transport.direct = True
    await transport.write("s", {"type": "text", "text": "c"})  # queued behind them, not written now
    assert transport.now == []
    assert await settle_writes(transport, "s", 3) == ["a", "b", "c"]
    assert transport.calls[0] == [json.dumps({"type": "text", "text": t}) for t in "abc"]

    gate = asyncio.Event()
    write_batch = transport._do_write_batch

    async def slow_batch(session_id: str, frames: list[bytes | str]) -> None:
        await gate.wait()  # the writer holds "d", "e" (the queue is empty meanwhile)
        await write_batch(session_id, frames)

    transport._do_write_batch = slow_batch  # type: ignore[method-assign]
    transport.direct = False
    await transport.write_many("s", [{"type": "text", "text": "d"}, {"type": "text", "text": "e"}])
    transport.direct = True
    for _ in range(5):
        await asyncio.sleep(0)
    assert transport._io["s"].writes.empty() and transport._io["s"].writing
    await transport.write("s", {"type": "text", "text": "f"})
    assert transport.now == []  # queued: the writer's "d", "e" go first
    gate.set()
    assert await settle_writes(transport, "s", 6) == list("abcdef")
    await transport.write("s", {"type": "text", "text": "g"})
    assert transport.now == [["g"]]  # idle again: at once
    await transport.stop()


async def test_device_tools_callback_is_per_session() -> None:
    transport = PipeTransport()
    transport.connect("a")
    transport.connect("b")
    got: list[tuple[str, list[Any]]] = []

    async def ready_a(tools: list[Any]) -> None:
        got.append(("a", tools))

    transport.set_device_tools_callback("a", ready_a)
    await transport.notify_device_tools_ready("a", ["t1"])
    await transport.notify_device_tools_ready("b", ["t2"])  # no callback: nothing happens
    assert got == [("a", ["t1"])]
    await transport.stop()


async def test_an_inline_handler_takes_messages_only_while_nothing_waits_for_read(no_leaked_tasks) -> None:
    transport = PipeTransport()
    transport.connect("s")
    taken: list[Message] = []

    def inline(message: Message) -> bool:
        if message.get("type") != "frame":
            return False  # left to read()
        if message.get("n") == "bad":
            raise ValueError("a handler bug")
        taken.append(message)
        return True

    transport.set_inline_handler("s", inline)
    feed = transport.incoming["s"]

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    feed.put_nowait(json.dumps({"type": "frame", "n": 1}))
    await settle()
    assert taken == [{"type": "frame", "n": 1}]
    # A declined message waits for read(); a frame behind it must not overtake it.
    feed.put_nowait(json.dumps({"type": "text", "text": "x"}))
    feed.put_nowait(json.dumps({"type": "frame", "n": 2}))
    await settle()
    assert taken == [{"type": "frame", "n": 1}]
    assert await transport.read("s") == {"type": "text", "text": "x"}
    assert await transport.read("s") == {"type": "frame", "n": 2}
    # A failing handler costs that message (logged), not the session.
    feed.put_nowait(json.dumps({"type": "frame", "n": "bad"}))
    feed.put_nowait(json.dumps({"type": "text", "text": "y"}))
    assert await transport.read("s") == {"type": "text", "text": "y"}
    feed.put_nowait(json.dumps({"type": "frame", "n": 3}))
    await settle()
    assert taken[-1] == {"type": "frame", "n": 3}
    await transport.stop()


def test_protocol_mcp_helpers() -> None:
    protocol = JsonProtocol()
    message = protocol.create_mcp_message({"jsonrpc": "2.0", "id": 3})
    assert message == {"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 3}}
    assert protocol.is_mcp_message(message)
    assert protocol.get_mcp_payload(message) == {"jsonrpc": "2.0", "id": 3}
    assert protocol.get_mcp_payload({"type": "mcp", "payload": "x"}) is None
    assert protocol.get_mcp_payload({"type": "listen"}) is None
