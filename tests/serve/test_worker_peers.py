"""The supervisor's side of the workers, in one process: `Peers` against real aiohttp servers on
Unix sockets (what workers run), `merge_metrics`, and the port reservation."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from vixio.fleet.peers import PeerReply, Peers, holder_order
from vixio.serve.lifecycle import WorkerProcess
from vixio.serve.supervisor import listen_port, merge_metrics

pytestmark = pytest.mark.integration


async def _worker_app(index: int, sessions: list[str], path: str) -> web.AppRunner:
    """A worker's session routes: its sessions, one session's detail (404 elsewhere), a slow route."""

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"sessions": sessions})

    async def one(request: web.Request) -> web.Response:
        session_id = request.match_info["sid"]
        if session_id not in sessions:
            return web.json_response({"error": "not here"}, status=404)
        return web.json_response({"session": session_id, "worker": index})

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2.5)
        return web.json_response({})

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {"worker": index, "body": (await request.read()).decode(), "type": request.headers.get("Content-Type")}
        )

    app = web.Application()
    app.router.add_get("/sessions", listing)
    app.router.add_get("/sessions/{sid}", one)
    app.router.add_get("/slow", slow)
    app.router.add_post("/echo", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, path).start()
    return runner


@pytest.fixture
async def peers(tmp_path: Path) -> AsyncIterator[Peers]:
    runners = []
    client = Peers(timeout=1.0)
    for index, sessions in enumerate((["a", "b"], ["c"])):
        path = str(tmp_path / f"w{index}.sock")
        runners.append(await _worker_app(index, sessions, path))
        client.add(f"w{index}", path)
    yield client
    await client.close()
    for runner in runners:
        await runner.cleanup()


async def test_gather_asks_every_worker_in_order(peers: Peers) -> None:
    replies = await peers.gather("GET", "/sessions")
    assert [(r.worker, r.status, r.body) for r in replies] == [
        ("w0", 200, {"sessions": ["a", "b"]}),
        ("w1", 200, {"sessions": ["c"]}),
    ]


async def test_forward_first_finds_the_worker_that_has_the_session(peers: Peers) -> None:
    reply = await peers.forward_first("GET", "/sessions/c")
    assert (reply.worker, reply.status, reply.body) == ("w1", 200, {"session": "c", "worker": 1})
    assert (await peers.forward_first("GET", "/sessions/a")).worker == "w0"
    missing = await peers.forward_first("GET", "/sessions/zzz")
    assert missing.status == 404


async def test_a_worker_that_is_gone_or_slow_is_reported_not_waited_for(peers: Peers, tmp_path: Path) -> None:
    peers.discard("w1")
    assert peers.workers == ["w0"]
    # The session may live on a worker that cannot answer: 502, not a misleading 404.
    peers.add("w1", str(tmp_path / "nobody.sock"))
    reply = await peers.forward_first("GET", "/sessions/c")
    assert reply.status == 502 and "w1" in reply.body["error"]
    started = asyncio.get_running_loop().time()
    slow = await peers.request("w0", "GET", "/slow")
    assert slow.status == 502 and asyncio.get_running_loop().time() - started < 2.4
    assert (await peers.request("w7", "GET", "/sessions")).status == 502


async def test_forward_any_takes_turns_and_passes_the_body(peers: Peers) -> None:
    replies = [
        await peers.forward_any("POST", "/echo", body=b"picture", headers={"Content-Type": "image/jpeg"})
        for _ in range(4)
    ]
    assert [r.body["worker"] for r in replies] in ([0, 1, 0, 1], [1, 0, 1, 0])
    assert {(r.body["body"], r.body["type"]) for r in replies} == {("picture", "image/jpeg")}
    assert (await Peers().forward_any("POST", "/echo")).status == 503


def test_workers_are_sorted_by_instance_then_number() -> None:
    assert sorted(["b/w1", "w10", "a/w2", "w2", "a/w10"], key=holder_order) == ["w2", "w10", "a/w2", "a/w10", "b/w1"]


def test_merge_metrics_tags_sessions_and_lists_every_worker() -> None:
    workers = [WorkerProcess(0, "w0.sock", ready=True), WorkerProcess(1, "w1.sock", restarts=2)]

    def body(worker: int, pid: int, sessions: list[str]) -> dict[str, object]:
        return {
            "sessions": len(sessions),
            "detail": [{"session_id": s} for s in sessions],
            "workers": [{"worker": worker, "pid": pid, "sessions": len(sessions), "rss_mb": 100.0}],
        }

    merged = merge_metrics(
        workers,
        [PeerReply("w0", 200, body(0, 11, ["a", "b"])), PeerReply("w1", 502, {"error": "worker w1 is not running"})],
    )
    assert merged["sessions"] == 2
    assert merged["detail"] == [{"session_id": "a", "worker": 0}, {"session_id": "b", "worker": 0}]
    assert merged["workers"][0] == {
        "worker": 0,
        "pid": 11,
        "sessions": 2,
        "rss_mb": 100.0,
        "status": "up",
        "restarts": 0,
    }
    assert merged["workers"][1]["status"] == "not answering" and merged["workers"][1]["restarts"] == 2
    assert merged["rss_mb"] >= 100.0 and merged["supervisor"]["pid"] > 0


def test_the_supervisors_port_is_refused_when_someone_listens_and_free_again_after() -> None:
    listener = listen_port("127.0.0.1", 0)
    port = listener.getsockname()[1]
    try:
        with pytest.raises(OSError):  # a second vixio on the same port must not share it
            listen_port("127.0.0.1", port)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            accepted, _ = listener.accept()  # it listens: devices wait in its backlog until accepted
            accepted.close()
    finally:
        listener.close()
    listen_port("127.0.0.1", port).close()  # a restart gets its port back at once


async def test_supervisor_metrics_is_an_operator_route_and_lists_workers_that_are_down() -> None:
    import aiohttp

    from vixio.config.models import VixioConfig
    from vixio.serve.supervisor import Supervisor

    config = VixioConfig.model_validate(
        {
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "http": {"host": "127.0.0.1", "port": 0, "admin_token": "s3cret-admin-token"},
            }
        }
    )
    supervisor = Supervisor(config, 2)
    await supervisor.ota.start()  # the HTTP side alone: no worker started
    url = f"http://127.0.0.1:{supervisor.ota.port}/metrics.json"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url) as response:
                assert response.status == 401
            async with http.get(url, headers={"Authorization": "Bearer s3cret-admin-token"}) as response:
                assert response.status == 200
                body = await response.json()
    finally:
        await supervisor.stop()
    assert body["sessions"] == 0
    assert [(line["worker"], line["status"]) for line in body["workers"]] == [(0, "down"), (1, "down")]
