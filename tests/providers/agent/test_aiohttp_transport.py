"""The agent's OpenAI clients on aiohttp (`aiohttp_transport`, `openai_clients`), against real
servers on loopback: streamed events arrive as they are sent, each failure is the SDK error (and
the user's sentence) it was on httpx2's own stack, connections are reused and pools are closed on
their loop, without aiohttp's "Unclosed client session"."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import warnings
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx2
import openai
import pytest
from aiohttp import web

from vixio.providers.agent.base import AgentError, AgentTextDelta
from vixio.providers.agent.openai_agents.aiohttp_transport import AiohttpTransport
from vixio.providers.agent.openai_agents.clients import _CLIENTS, close_openai_clients, shared_openai_client
from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.loopback import LoopbackServer

pytestmark = pytest.mark.process

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HandlerServer(LoopbackServer):
    """`POST /v1/chat/completions` answered by one handler."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler

    def build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handler)
        return app


def sse_chunk(text: str) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def transports() -> list[AiohttpTransport]:
    return _CLIENTS[asyncio.get_running_loop()].pools


async def pool_after_a_turn() -> aiohttp.ClientSession:
    """The aiohttp session under the agent's client once one turn ran on the scripted server."""
    async with ScriptedLLMServer(Reply.text("Hello.")) as server:
        agent = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
        await agent.initialize()
        [_ async for _ in agent.chat("hi")]
        session = transports()[0]._session
        assert session is not None
        return session


async def test_the_agents_client_runs_on_aiohttp() -> None:
    async with ScriptedLLMServer(Reply.text("Hello there, friend.")) as server:
        agent = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
        await agent.initialize()
        text = "".join([event.text async for event in agent.chat("hi") if isinstance(event, AgentTextDelta)])
        assert text == "Hello there, friend."
        [transport] = transports()
        assert isinstance(transport._session, aiohttp.ClientSession) and not transport._session.closed
        await close_openai_clients()


async def test_a_streamed_event_arrives_before_the_next_is_sent() -> None:
    first_received = asyncio.Event()
    seen_by_server: list[bool] = []

    async def two_chunks(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(sse_chunk("Hello"))
        try:  # up to 300 ms for the client to say it has the first chunk
            await asyncio.wait_for(first_received.wait(), 0.3)
        except TimeoutError:
            pass
        seen_by_server.append(first_received.is_set())
        await response.write(sse_chunk(" world"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async with HandlerServer(two_chunks) as server:
        client = shared_openai_client(server.base_url, "k", 5.0)
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        texts = []
        async for chunk in stream:
            texts.append(chunk.choices[0].delta.content)
            first_received.set()
        assert texts == ["Hello", " world"]
        assert seen_by_server == [True]  # the first was received while the server held the second
        await close_openai_clients()


class CountingLLMServer(ScriptedLLMServer):
    """The scripted server, counting the TCP connections its requests came on."""

    def __init__(self, *replies: Reply) -> None:
        super().__init__(*replies)
        self.peers: set[Any] = set()

    def build_app(self) -> web.Application:
        app = super().build_app()
        app.middlewares.append(self._count)
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))
        return await handler(request)


async def test_sequential_turns_share_one_connection() -> None:
    async with CountingLLMServer(*(Reply.text(f"Answer {n}.") for n in range(3))) as server:
        agent = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
        await agent.initialize()
        for question in ("one", "two", "three"):
            [_ async for _ in agent.chat(question)]
        server.assert_all_consumed()
        assert len(server.peers) == 1
        await close_openai_clients()


async def test_a_refused_connection_names_the_address_not_a_timeout() -> None:
    port = closed_port()
    transport = AiohttpTransport(limits=httpx2.Limits())
    async with httpx2.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx2.ConnectError) as caught:
            await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={})
    assert str(caught.value) == f"cannot connect to 127.0.0.1:{port}: Connection refused"

    agent = OpenAIAgentProvider("openai/m", api_base=f"http://127.0.0.1:{port}/v1", api_key="k")
    await agent.initialize()
    with pytest.raises(AgentError) as failed:
        [_ async for _ in agent.chat("hi")]
    assert str(failed.value) == (
        f"could not reach the language model at http://127.0.0.1:{port}/v1: connection refused at 127.0.0.1:{port}"
    )
    assert isinstance(failed.value.__cause__, openai.APIConnectionError)
    await close_openai_clients()


async def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    async def never(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    async with HandlerServer(never) as server:
        client = shared_openai_client(server.base_url, "k", 0.3)
        with pytest.raises(openai.APITimeoutError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert isinstance(caught.value.__cause__, httpx2.ReadTimeout)

        agent = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k", timeout=0.3)
        await agent.initialize()
        with pytest.raises(AgentError, match=r"did not answer within 0\.3 s|timed out"):
            [_ async for _ in agent.chat("hi")]
        await close_openai_clients()


@pytest.mark.parametrize(("status", "error"), [(401, openai.AuthenticationError), (500, openai.InternalServerError)])
async def test_http_errors_keep_the_sdks_status_errors(status: int, error: type[Exception]) -> None:
    async with ScriptedLLMServer(Reply.error(status, "nope")) as server:
        client = shared_openai_client(server.base_url, "k", 5.0)
        with pytest.raises(error) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert caught.value.status_code == status  # type: ignore[attr-defined]
        await close_openai_clients()


async def test_closing_the_loops_clients_closes_their_sessions() -> None:
    async with ScriptedLLMServer(Reply.text("Hi."), Reply.text("Again."), Reply.text("New.")) as server:
        agent = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
        await agent.initialize()
        [_ async for _ in agent.chat("hi")]
        [pool] = transports()
        session = pool._session
        assert session is not None and not session.closed
        await close_openai_clients()
        assert session.closed and asyncio.get_running_loop() not in _CLIENTS
        # A client still in use (another server on the loop) opens a pool again, closed like the first.
        assert "".join([e.text async for e in agent.chat("hi") if isinstance(e, AgentTextDelta)]) == "Again."
        assert transports() == [pool] and pool._session is not None and pool._session is not session
        again = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
        await again.initialize()
        assert "".join([e.text async for e in again.chat("hi") if isinstance(e, AgentTextDelta)]) == "New."
        reopened = pool._session
        await close_openai_clients()
        assert reopened.closed


def test_a_loop_shutting_down_closes_its_clients_without_a_warning() -> None:
    """`asyncio.run` (and pytest-asyncio's runner) close the loop's clients as it ends; the
    loop is then free to be collected."""
    reported: list[str] = []
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    sessions: list[aiohttp.ClientSession] = []

    async def one_turn() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
        loops.append(weakref.ref(loop))
        sessions.append(await pool_after_a_turn())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(one_turn())
        asyncio.run(one_turn())
        assert all(session.closed for session in sessions)
        sessions.clear()
        gc.collect()
    assert reported == []
    assert not [w for w in caught if "nclosed" in str(w.message)], [str(w.message) for w in caught]
    assert [ref() for ref in loops] == [None, None]


def test_a_loop_closed_without_shutting_down_is_forgotten_silently() -> None:
    reported: list[str] = []

    async def one_turn() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
        async with ScriptedLLMServer(Reply.text("Hello.")) as server:
            agent = OpenAIAgentProvider("openai/m", api_base=server.base_url, api_key="k")
            await agent.initialize()
            [_ async for _ in agent.chat("hi")]

    loop = asyncio.new_event_loop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.run_until_complete(one_turn())
        loop.close()  # no shutdown_asyncgens(): the clients could not be closed on it
        dead = weakref.ref(loop)
        del loop
        asyncio.run(one_turn())  # the next loop's first client forgets the closed one
        gc.collect()
    assert dead() is None
    assert reported == []
    assert not [
        w for w in caught if "nclosed client session" in str(w.message) or "nclosed connector" in str(w.message)
    ], [str(w.message) for w in caught]


async def test_proxies_from_the_environment_are_used_unless_no_proxy_names_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with ScriptedLLMServer(Reply.text("Via the proxy.")) as proxy:  # it answers the absolute-form request
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "bypassed.invalid")
        monkeypatch.delenv("http_proxy", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = shared_openai_client("http://llm.invalid/v1", "k", 5.0)
        answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "Via the proxy."
        bypassed = shared_openai_client("http://bypassed.invalid/v1", "k", 5.0)
        with pytest.raises(openai.APIConnectionError):  # straight to a host DNS does not know
            await bypassed.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await close_openai_clients()


def test_httpx2_timeouts_become_aiohttp_limits_per_read_not_for_the_whole() -> None:
    from vixio.providers.agent.openai_agents.aiohttp_transport import _client_timeout

    sdk_default = _client_timeout(5.0, 600.0, 600.0)  # openai.DEFAULT_TIMEOUT
    assert (sdk_default.total, sdk_default.sock_connect, sdk_default.sock_read, sdk_default.connect) == (
        None,
        5.0,
        600.0,
        605.0,
    )
    unlimited = _client_timeout(None, None, None)
    assert (unlimited.total, unlimited.sock_connect, unlimited.sock_read, unlimited.connect) == (None, None, None, None)


def test_each_aiohttp_failure_becomes_the_httpx2_error_for_what_happened() -> None:
    from aiohttp.client_reqrep import ConnectionKey

    from vixio.providers.agent.openai_agents.aiohttp_transport import httpx_error

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    key = ConnectionKey("127.0.0.1", 9, False, True, None, None, None)
    cases: list[tuple[BaseException, type[Exception]]] = [
        (aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused")), httpx2.ConnectError),
        (aiohttp.ClientConnectorDNSError(key, socket.gaierror(-2, "Name or service not known")), httpx2.ConnectError),
        (aiohttp.ClientProxyConnectionError(key, ConnectionRefusedError(111, "refused")), httpx2.ProxyError),
        (aiohttp.ClientConnectorCertificateError(key, ssl_error()), httpx2.ConnectError),
        (aiohttp.ConnectionTimeoutError("Connection timeout to host"), httpx2.ConnectTimeout),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), httpx2.ReadTimeout),
        (aiohttp.ServerDisconnectedError(), httpx2.RemoteProtocolError),
        (aiohttp.ClientPayloadError("Response payload is not completed"), httpx2.RemoteProtocolError),
        (aiohttp.ClientConnectionResetError("Connection reset by peer"), httpx2.ReadError),
        (aiohttp.NonHttpUrlClientError("ftp://x"), httpx2.UnsupportedProtocol),
        (aiohttp.InvalidUrlClientError("http://"), httpx2.UnsupportedProtocol),
    ]
    for error, expected in cases:
        assert type(httpx_error(error, request)) is expected, (error, expected)
    refused = httpx_error(cases[0][0], request)
    assert str(refused) == "cannot connect to 127.0.0.1:9: Connection refused"
    assert str(httpx_error(cases[1][0], request)) == "cannot connect to 127.0.0.1:9: Name or service not known"


def ssl_error() -> Exception:
    import ssl

    error = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    return error


async def test_the_voice_stack_closes_the_loops_pools_when_the_server_stops() -> None:
    from vixio.config.models import VixioConfig
    from vixio.voice.stack import VoiceStack

    session = await pool_after_a_turn()
    await VoiceStack(VixioConfig.model_validate({})).close()
    assert session.closed and asyncio.get_running_loop() not in _CLIENTS


async def test_tls_is_verified_and_a_failed_handshake_is_named(tmp_path: Any) -> None:
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command (Debian package openssl) for a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/v1/ok", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context).start()
    port = runner.addresses[0][1]
    try:
        trusting = AiohttpTransport(limits=httpx2.Limits(), ssl_context=ssl.create_default_context(cafile=cert))
        async with httpx2.AsyncClient(transport=trusting) as client:
            assert (await client.get(f"https://127.0.0.1:{port}/v1/ok")).json() == {"ok": True}
        agent = OpenAIAgentProvider("openai/m", api_base=f"https://127.0.0.1:{port}/v1", api_key="k")
        await agent.initialize()
        with pytest.raises(AgentError) as failed:  # the default trust store does not know the certificate
            [_ async for _ in agent.chat("hi")]
        assert str(failed.value) == (
            f"could not reach the language model at https://127.0.0.1:{port}/v1: "
            f"TLS handshake with 127.0.0.1:{port} failed: CERTIFICATE_VERIFY_FAILED"
        )
        await close_openai_clients()
    finally:
        await runner.cleanup()
