"""send_together: several messages in one socket write, between a real websockets server and client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest
import websockets
from websockets.asyncio.server import ServerConnection, serve

from vixio.patches import websockets as ws_send
from vixio.patches.websockets import batching_available, can_send_now, send_now, send_together

pytestmark = pytest.mark.integration


class WriteRecorder:
    """Records what the server's connection hands its asyncio transport, one entry per write
    (`writelines` is one write: a join, as asyncio's own does before Python 3.12)."""

    def __init__(self, connection: ServerConnection) -> None:
        self.writes: list[bytes] = []
        transport = connection.transport
        write = transport.write

        def record_write(data: bytes) -> None:
            self.writes.append(bytes(data))
            write(data)

        def record_writelines(chunks: list[bytes]) -> None:
            record_write(b"".join(chunks))

        transport.write = record_write  # type: ignore[method-assign]
        transport.writelines = record_writelines  # type: ignore[method-assign]


@asynccontextmanager
async def connected(**client_options: object) -> AsyncIterator[tuple[ServerConnection, websockets.ClientConnection]]:
    """A server connection (held open until the test ends) and the client at its other end."""
    accepted: asyncio.Future[ServerConnection] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def handler(connection: ServerConnection) -> None:
        accepted.set_result(connection)
        await done.wait()

    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with websockets.connect(f"ws://127.0.0.1:{port}", compression=None, **client_options) as client:
            connection = await accepted
            try:
                yield connection, client
            finally:
                done.set()


async def receive(client: websockets.ClientConnection, count: int) -> list[bytes | str]:
    return [await asyncio.wait_for(client.recv(), 2) for _ in range(count)]


@pytest.fixture
def batching(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool | None], None]:
    """Force the batching decision (None: decide again on the next connection)."""
    return lambda value: monkeypatch.setattr(ws_send, "_batching", value)


async def test_a_batch_arrives_in_order_and_intact_from_one_write() -> None:
    frames: list[bytes | str] = [bytes([i]) * (100 + i) for i in range(3)]
    async with connected() as (connection, client):
        recorder = WriteRecorder(connection)
        await send_together(connection, frames)
        assert await receive(client, 3) == frames
        assert len(recorder.writes) == 1
        assert recorder.writes[0].endswith(frames[-1])


async def test_text_and_binary_messages_keep_their_kinds_and_order() -> None:
    frames: list[bytes | str] = ['{"type":"tts","state":"start"}', b"\x01opus", '{"type":"tts","state":"stop"}']
    async with connected() as (connection, client):
        recorder = WriteRecorder(connection)
        await send_together(connection, frames)
        assert await receive(client, 3) == frames
        assert len(recorder.writes) == 1


async def test_a_batch_waits_for_a_fragmented_message_to_finish() -> None:
    gate = asyncio.Event()

    async def fragments() -> AsyncIterator[bytes]:
        yield b"first half, "
        await gate.wait()
        yield b"second half"

    async with connected() as (connection, client):
        fragmented = asyncio.create_task(connection.send(fragments()))
        await asyncio.sleep(0.01)
        batch = asyncio.create_task(send_together(connection, [b"a", b"b"]))
        await asyncio.sleep(0.01)
        assert not batch.done()  # no frame of the batch inside the fragmented message
        gate.set()
        await asyncio.wait_for(asyncio.gather(fragmented, batch), 2)
        assert await receive(client, 3) == [b"first half, second half", b"a", b"b"]


async def test_a_batch_waits_for_the_write_buffer_to_drain() -> None:
    frame = b"\x00" * 2**18
    # The client reads nothing until told: its queue, then the kernel's buffers, then the
    # server's write buffer fill up, and a batch must wait for drain as `send` does.
    async with connected(max_size=None) as (connection, client):
        blocked = None
        sent = 0
        for _ in range(400):
            batch = asyncio.create_task(send_together(connection, [frame, frame]))
            await asyncio.wait({batch}, timeout=0.05)
            sent += 2
            if not batch.done():
                blocked = batch
                break
        assert blocked is not None, "the write buffer never filled"
        assert connection.transport.get_write_buffer_size() > 0
        received = 0
        while received < sent:
            assert await asyncio.wait_for(client.recv(), 2) == frame
            received += 1
        await asyncio.wait_for(blocked, 2)


async def test_a_closed_connection_raises_connection_closed_like_send() -> None:
    async with connected() as (connection, client):
        await client.close()
        await asyncio.wait_for(connection.wait_closed(), 2)
        with pytest.raises(websockets.ConnectionClosedOK):
            await connection.send(b"a")
        with pytest.raises(websockets.ConnectionClosedOK):
            await send_together(connection, [b"a", b"b"])


async def test_without_the_internals_each_message_goes_through_send(batching) -> None:
    batching(False)
    frames: list[bytes | str] = [b"one", "two", b"three"]
    async with connected() as (connection, client):
        recorder = WriteRecorder(connection)
        await send_together(connection, frames)
        assert await receive(client, 3) == frames
        assert len(recorder.writes) == 3


async def test_batching_is_decided_on_the_first_connection(batching) -> None:
    batching(None)
    assert not batching_available(SimpleNamespace(protocol=None, transport=None))  # type: ignore[arg-type]
    assert not batching_available(SimpleNamespace(protocol=None, transport=None, send_in_progress=None))  # type: ignore[arg-type]  # decided
    batching(None)
    async with connected() as (connection, _):
        assert batching_available(connection)


async def test_send_now_writes_a_batch_at_once_in_one_write() -> None:
    frames: list[bytes | str] = ['{"type":"tts","state":"start"}', b"\x01opus", b"\x02opus"]
    async with connected() as (connection, client):
        recorder = WriteRecorder(connection)
        assert can_send_now(connection)
        send_now(connection, frames)  # no coroutine: written before this line returns
        assert len(recorder.writes) == 1 and recorder.writes[0].endswith(b"\x02opus")
        assert await receive(client, 3) == frames


async def test_send_now_is_refused_while_anything_stands_in_the_way(batching) -> None:
    gate = asyncio.Event()

    async def fragments() -> AsyncIterator[bytes]:
        yield b"first half, "
        await gate.wait()
        yield b"second half"

    async with connected(max_size=None) as (connection, client):
        fragmented = asyncio.create_task(connection.send(fragments()))
        await asyncio.sleep(0.01)
        assert not can_send_now(connection)  # a frame now would land inside the fragmented message
        gate.set()
        await asyncio.wait_for(fragmented, 2)
        assert can_send_now(connection)
        # Bytes waiting in the write buffer (the client reads nothing): flow control belongs to
        # `send` / `send_together`, which wait for it.
        frame = b"\x00" * 2**18
        sent = 0
        for _ in range(400):
            sending = asyncio.create_task(connection.send(frame))
            sent += 1
            await asyncio.wait({sending}, timeout=0.05)
            if connection.transport.get_write_buffer_size() > 0:
                break
        assert not can_send_now(connection)
        for _ in range(sent):  # the client reads everything: the buffer drains, the last send ends
            await asyncio.wait_for(client.recv(), 2)
        await asyncio.wait_for(sending, 2)
        assert can_send_now(connection)
        batching(False)
        assert not can_send_now(connection)  # without the internals: never
        batching(True)
    async with connected() as (connection, client):
        await client.close()
        await asyncio.wait_for(connection.wait_closed(), 2)
        assert not can_send_now(connection)
