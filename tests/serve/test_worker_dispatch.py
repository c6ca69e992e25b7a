"""The supervisor's dispatch: each device to the worker holding the fewest connections."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from vixio.fleet.plan import listen_port, reuse_port_supported
from vixio.serve.dispatch import Adopter, Dispatcher

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

Held = dict[int, list[tuple[socket.socket, Callable[[], None]]]]


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def workers(count: int) -> tuple[Dispatcher, list[Adopter], Held]:
    dispatcher = Dispatcher(listen_port("127.0.0.1", 0))
    held: Held = {i: [] for i in range(count)}
    adopters = []
    for index in range(count):

        async def adopt(sock: socket.socket, on_closed: Callable[[], None], index: int = index) -> None:
            held[index].append((sock, on_closed))

        adopters.append(Adopter(dispatcher.attach(index), adopt))
        dispatcher.ready(index)
    dispatcher.start()
    return dispatcher, adopters, held


async def shut_down(
    dispatcher: Dispatcher, adopters: list[Adopter], clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
) -> None:
    for _, writer in clients:
        writer.close()
    for adopter in adopters:
        adopter.close()
    await dispatcher.stop()


async def connect(dispatcher: Dispatcher) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", dispatcher.listener.getsockname()[1])


async def test_each_device_goes_to_the_worker_with_the_fewest_and_a_closed_one_frees_its_place() -> None:
    dispatcher, adopters, held = await workers(2)
    clients = [await connect(dispatcher) for _ in range(6)]
    await until(lambda: sum(map(len, held.values())) == 6, "six adopted connections")
    assert [len(held[0]), len(held[1])] == [3, 3]  # not the ±2 of a hash
    # The adopted socket is the device's connection itself: what it sends arrives, unread before.
    clients[0][1].write(b"GET / HTTP/1.1\r\n")
    await clients[0][1].drain()
    sock = held[0][0][0]
    sock.setblocking(True)
    sock.settimeout(2)
    assert sock.recv(100) == b"GET / HTTP/1.1\r\n"
    for adopted, on_closed in held[0][:2]:  # two devices of worker 0 leave
        adopted.close()
        on_closed()
    await until(lambda: dispatcher.channels[0].open_connections == 1, "worker 0's closes reported")
    clients += [await connect(dispatcher) for _ in range(2)]
    await until(lambda: sum(map(len, held.values())) == 8, "two more adopted")
    assert [len(held[0]), len(held[1])] == [5, 3]  # both new devices went to worker 0 (1 < 3)
    await shut_down(dispatcher, adopters, clients)


async def test_a_dead_worker_gets_no_devices_and_its_replacement_does_once_ready() -> None:
    dispatcher, adopters, held = await workers(2)
    adopters[1].close()  # worker 1 dies: its channel closes
    await until(lambda: 1 not in dispatcher.channels, "worker 1 detached")
    clients = [await connect(dispatcher) for _ in range(3)]
    await until(lambda: len(held[0]) == 3, "worker 0 taking every device")
    replacement: list[socket.socket] = []

    async def adopt(sock: socket.socket, on_closed: Callable[[], None]) -> None:
        replacement.append(sock)

    adopters[1] = Adopter(dispatcher.attach(1), adopt)
    clients.append(await connect(dispatcher))
    await until(lambda: len(held[0]) == 4, "worker 0 taking a device while 1 is not ready")
    dispatcher.ready(1)
    clients.append(await connect(dispatcher))
    await until(lambda: len(replacement) == 1, "the ready replacement taking a device")
    await shut_down(dispatcher, adopters, clients)


async def test_with_no_worker_ready_devices_wait_in_the_backlog() -> None:
    dispatcher = Dispatcher(listen_port("127.0.0.1", 0))
    got: list[socket.socket] = []

    async def adopt(sock: socket.socket, on_closed: Callable[[], None]) -> None:
        got.append(sock)

    adopter = Adopter(dispatcher.attach(0), adopt)
    dispatcher.start()
    client = await connect(dispatcher)
    await asyncio.sleep(0.05)
    assert got == []  # the worker is still loading its models
    dispatcher.ready(0)
    await until(lambda: len(got) == 1, "the waiting device handed over")
    client[1].close()
    adopter.close()
    await dispatcher.stop()


async def test_a_burst_of_devices_is_handed_over_whole_and_evenly() -> None:
    dispatcher, adopters, held = await workers(2)
    clients = await asyncio.gather(*(connect(dispatcher) for _ in range(80)))
    await until(lambda: sum(map(len, held.values())) == 80, "all 80 adopted")
    assert [len(held[0]), len(held[1])] == [40, 40]
    await shut_down(dispatcher, adopters, list(clients))
