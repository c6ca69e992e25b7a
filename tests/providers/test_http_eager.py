"""vixio.patches.aiohttp: aiohttp's request-body writer starts at once on Python 3.11 (as on 3.12+)."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import pytest
from aiohttp import web

from vixio.patches import aiohttp as http_eager
from vixio.testing.loop_ticks import LoopTicks

pytestmark = pytest.mark.integration

client_reqrep = pytest.importorskip("aiohttp.client_reqrep")


@pytest.fixture
async def echo_url():
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(body=len(body).to_bytes(8, "big"))

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    await runner.cleanup()


async def post_ticks(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, int]:
    async with LoopTicks() as ticks:
        before = ticks.count
        async with session.post(url, data=body) as response:
            received = int.from_bytes(await response.read(), "big")
        return received, ticks.count - before


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="aiohttp starts the writer eagerly itself")
async def test_a_request_body_leaves_a_loop_iteration_sooner_and_big_bodies_arrive_whole(echo_url, monkeypatch) -> None:
    assert http_eager.install()
    eager = client_reqrep.asyncio
    assert eager.CancelledError is asyncio.CancelledError  # everything else is asyncio's
    async with aiohttp.ClientSession() as session:
        await post_ticks(session, echo_url, b"warm")  # a pooled connection for both
        monkeypatch.setattr(client_reqrep, "asyncio", asyncio)
        plain = [(await post_ticks(session, echo_url, b'{"input": "hello"}'))[1] for _ in range(5)]
        monkeypatch.setattr(client_reqrep, "asyncio", eager)
        fast = [(await post_ticks(session, echo_url, b'{"input": "hello"}'))[1] for _ in range(5)]
        print("iterations per request, plain vs eager:", plain, fast)
        assert sorted(fast)[2] < sorted(plain)[2], (plain, fast)
        big = b"\x01" * (8 * 2**20)  # past the socket buffers: the writer waits, in its task
        received, _ = await post_ticks(session, echo_url, big)
        assert received == len(big)
