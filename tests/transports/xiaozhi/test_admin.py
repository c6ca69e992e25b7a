"""The operator token guard on a real aiohttp server over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from vixio.transports.xiaozhi.http.admin import ADDRESS_BURST, COOKIE_NAME, AdminGuard, TokenThrottle

pytestmark = pytest.mark.integration


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
        for headers in (
            {"X-Forwarded-For": "203.0.113.9"},
            {"Forwarded": "for=203.0.113.9"},
            {"Origin": "http://evil.example"},
        ):
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


async def test_a_foreign_origin_is_refused_whatever_token_it_carries(http: aiohttp.ClientSession) -> None:
    runner, url = await _serve(AdminGuard("s3cret-token-for-tests"))
    try:
        headers = {"Authorization": "Bearer s3cret-token-for-tests"}
        async with http.get(url, headers={**headers, "Origin": "http://evil.example"}) as response:
            assert response.status == 403 and "other sites" in (await response.json())["error"]
        host = url.split("/")[2]
        async with http.get(url, headers={**headers, "Origin": f"http://{host}"}) as response:
            assert response.status == 200
    finally:
        await runner.cleanup()


def test_the_throttle_counts_wrong_tokens_by_address_and_overall() -> None:
    now = [1000.0]
    throttle = TokenThrottle(
        address_burst=5,
        address_interval=10.0,
        overall_burst=8,
        overall_interval=1.0,
        max_addresses=3,
        clock=lambda: now[0],
    )
    for _ in range(5):
        assert throttle.retry_after("203.0.113.9") == 0
        throttle.failed("203.0.113.9")
    assert throttle.retry_after("203.0.113.9") == pytest.approx(10.0)
    assert throttle.retry_after("198.51.100.1") == 0  # another address is not held by this one's failures
    now[0] += 10.0
    assert throttle.retry_after("203.0.113.9") == 0  # one more allowed after an interval
    throttle.failed("203.0.113.9")
    assert throttle.retry_after("203.0.113.9") == pytest.approx(10.0)
    # Overall: 8 wrong tokens from any addresses hold everyone, whatever the address.
    now[0] += 100.0
    for index in range(8):
        throttle.failed(f"192.0.2.{index}")
    assert throttle.retry_after("198.51.100.1") == pytest.approx(1.0)
    assert throttle.addresses <= 3  # memory stays bounded however many addresses guess


async def test_the_guard_refuses_unchecked_after_a_few_wrong_tokens(http: aiohttp.ClientSession) -> None:
    runner, url = await _serve(AdminGuard("s3cret-token-for-tests"))
    try:
        answers = []
        for _ in range(7):
            async with http.get(url, headers={"Authorization": "Bearer guess"}) as response:
                answers.append(response.status)
        assert answers == [401] * ADDRESS_BURST + [429] * (7 - ADDRESS_BURST)
        async with http.get(url, headers={"Authorization": "Bearer s3cret-token-for-tests"}) as response:
            assert response.status == 429 and int(response.headers["Retry-After"]) >= 1  # not even checked
        async with http.get(url) as response:  # no token: not counted, not throttled
            assert response.status == 401
    finally:
        await runner.cleanup()
