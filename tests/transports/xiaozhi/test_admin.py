"""The operator token guard on a real aiohttp server over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from vixio.transports.xiaozhi.admin import COOKIE_NAME, AdminGuard


async def _secret(request: web.Request) -> web.Response:
    return web.json_response({"secret": 42})


async def _serve(guard: AdminGuard) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/op", guard.protect(_secret))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/op"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_without_token_loopback_direct_callers_are_operators(http: aiohttp.ClientSession) -> None:
    runner, url = await _serve(AdminGuard(""))
    try:
        async with http.get(url) as response:
            assert response.status == 200
            assert (await response.json()) == {"secret": 42}
        # Through a proxy on this host, or from another site's page: not local any more.
        for headers in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
                        {"Origin": "http://evil.example"}):
            async with http.get(url, headers=headers) as response:
                assert response.status == 403
                assert "admin_token" in (await response.json())["error"]
        # The console page itself (same origin) is still local.
        host = url.split("/")[2]
        async with http.get(url, headers={"Origin": f"http://{host}"}) as response:
            assert response.status == 200
    finally:
        await runner.cleanup()


async def test_with_token_every_caller_needs_it(http: aiohttp.ClientSession) -> None:
    runner, url = await _serve(AdminGuard("s3cret-token"))
    try:
        async with http.get(url) as response:
            assert response.status == 401  # loopback is not enough once a token is configured
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
        async with http.get(url, headers={"Authorization": "Bearer wrong"}) as response:
            assert response.status == 401
        async with http.get(url, headers={"Authorization": "Bearer s3cret-token"}) as response:
            assert response.status == 200
        async with http.get(url + "?token=s3cret-token") as response:
            assert response.status == 200
        async with http.get(url, headers={"Cookie": f"{COOKIE_NAME}=s3cret-token"}) as response:
            assert response.status == 200
    finally:
        await runner.cleanup()
