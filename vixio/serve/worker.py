"""One worker process of `vixio serve --workers N`, started by the supervisor (vixio/serve/supervisor.py).

    python -m vixio.serve.worker --index 1 --workers 2 --socket RUN_DIR/w1.sock --http-port 8003 --dispatch-fd 5
    # the config comes on stdin

The supervisor writes the validated config as one JSON line on stdin and keeps stdin open: end
of file means the supervisor is gone (even killed outright), and the worker shuts down, so no
worker outlives it. The worker loads its models once, serves the devices the supervisor hands
over on the dispatch socket (each to the worker with the fewest: vixio/serve/dispatch.py), and answers
`VixioServer.session_routes` plus `GET /healthz` on its Unix socket, where its siblings reach
it too: a companion and its device on different workers are paired through them
(vixio/fleet/companions.py), and a background result reaches its device's next session on
another worker (vixio/app/task_results.py). SIGTERM: close every
session, then exit 0. SIGUSR1 (the supervisor's graceful stop): take no new device, let the
replies being made or spoken finish (`server.drain_timeout`), then as SIGTERM. SIGINT (Ctrl-C reaches the whole process group) is left to the
supervisor, which stops the workers in order.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from collections.abc import Sequence
from contextlib import suppress

from aiohttp import web
from loguru import logger

from vixio.app import shutdown
from vixio.app.log import setup_logging
from vixio.app.process_report import rss_mb
from vixio.app.reminders import PATH as REMINDERS_PATH
from vixio.app.server import SessionRoute, VixioServer
from vixio.app.task_results import PATH as TASK_RESULTS_PATH
from vixio.config.models import VixioConfig
from vixio.fleet.bus import fleet_bus
from vixio.fleet.companions import PATH as COMPANIONS_PATH
from vixio.fleet.companions import WorkerCompanionRelay
from vixio.fleet.directory import PATH as DIRECTORY_PATH
from vixio.fleet.directory import DirectoryRoute, holder_name
from vixio.fleet.peers import Peers
from vixio.serve.dispatch import Adopter, adopt_into

log = logger.bind(component="vixio.serve.worker")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one worker; exits the process itself after an orderly stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="python -m vixio.serve.worker", description=__doc__)
    parser.add_argument("--index", type=int, required=True, help="this worker's number (w0, w1, ...)")
    parser.add_argument("--workers", type=int, default=1, help="how many workers there are (RUN_DIR/w<i>.sock each)")
    parser.add_argument("--socket", required=True, help="Unix socket for the session routes")
    parser.add_argument("--http-port", type=int, required=True, help="the supervisor's HTTP (OTA) port")
    parser.add_argument(
        "--dispatch-fd",
        type=int,
        required=True,
        help="the Unix socket on which the supervisor hands over accepted connections",
    )
    args = parser.parse_args(argv)
    line = sys.stdin.buffer.readline()
    if not line:
        print(
            "vixio.serve.worker: no config on stdin (this process is started by `vixio serve --workers N`)",
            file=sys.stderr,
        )
        return 2
    config = VixioConfig.model_validate_json(line)
    setup_logging(config.log.level, tracebacks=config.log.tracebacks, process=f"w{args.index}")
    try:
        asyncio.run(run_worker(config, args.index, args.socket, args.http_port, args.dispatch_fd, args.workers))
    except Exception:
        log.exception("worker failed")
        return 1
    log.info("stopped")
    # Sessions, sockets and providers are closed. Tearing down the interpreter's module graph
    # would only cost seconds (litellm alone: 2-3 s on a busy 2-core machine), so end here, as
    # multiprocessing ends its children.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def run_worker(
    config: VixioConfig, index: int, socket_path: str, http_port: int, dispatch_fd: int, workers: int = 1
) -> None:
    """Serve until SIGTERM or until the supervisor goes away."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    _watch_supervisor(loop, stop)
    server = VixioServer(config, serve_http=False, worker_index=index)
    server.transport.adopt_path = socket_path + ".ws"  # devices come from the supervisor (vixio/serve/dispatch.py)
    server.transport.http_port = http_port  # for the vision URL given to devices
    # The siblings' sockets: what concerns a device works whatever worker holds it.
    siblings = Peers()
    holder = server.directory.holder
    for other in range(workers):
        if other != index:
            siblings.add(
                holder_name(server.instance, other), os.path.join(os.path.dirname(socket_path), f"w{other}.sock")
            )
    relay = WorkerCompanionRelay(server.transport, holder, siblings, directory=server.directory)
    server.transport.companions.relay = relay
    server.task_results.siblings, server.task_results.worker = siblings, holder
    server.mqtt.peers = siblings  # a push reaches the worker whose broker holds the device (vixio/app/mqtt.py)
    server.task_results.locate = server.directory.holders_of
    server.reminders.siblings, server.reminders.worker = siblings, holder  # a reminder for a device held elsewhere
    server.reminders.locate = server.directory.holders_of
    sessions = DirectoryRoute(server.transport, siblings)
    server.directory.close_elsewhere = sessions.close_elsewhere
    server.session_routes += [
        SessionRoute("POST", COMPANIONS_PATH, relay.handle),
        SessionRoute("POST", TASK_RESULTS_PATH, server.task_results.handle),
        SessionRoute("POST", REMINDERS_PATH, server.reminders.handle),
        SessionRoute("POST", DIRECTORY_PATH, sessions.handle),
    ]
    # Until the models are loaded SIGTERM keeps its default action: there is nothing to close yet.
    await server.start()
    websockets = server.transport.websocket_server
    adopter = Adopter(socket.socket(fileno=dispatch_fd), lambda sock, closed: adopt_into(websockets, sock, closed))
    draining = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def drain() -> None:
        draining.set()
        stop.set()

    loop.add_signal_handler(signal.SIGUSR1, drain)
    runner = await _serve_session_routes(server, socket_path)
    # A fleet: the other instances' workers over Redis, their calls answered by this worker's routes.
    own = Peers()
    own.add(holder, socket_path)
    bus = fleet_bus(config, holder, serve=lambda method, path, body: own.request(holder, method, path, json=body))
    if bus is not None:
        siblings.remote = bus
        await bus.start()
    try:
        await stop.wait()
        adopter.close()
        if draining.is_set():
            await server.drain(config.server.drain_timeout)
        log.info("stopping: closing {} session(s)", len(server.transport.connections))
    finally:
        adopter.close()
        await server.stop()
        await shutdown.step("the relay to the other workers", relay.close())
        if bus is not None:  # after the sessions: their ends are relayed too
            await shutdown.step("the fleet's bus", bus.close())
        await shutdown.step("the connections to the other workers", siblings.close())
        await shutdown.step("this worker's own routes client", own.close())
        await shutdown.step("the session routes", runner.cleanup())


async def _serve_session_routes(server: VixioServer, socket_path: str) -> web.AppRunner:
    app = web.Application()
    for route in server.session_routes:
        app.router.add_route(route.method, route.path, route.handler)

    async def health(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "worker": server.worker_index,
                "pid": os.getpid(),
                "websocket_port": server.transport.port,
                "sessions": len(server.transport.connections),
                "rss_mb": rss_mb(),
            }
        )

    app.router.add_get("/healthz", health)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    with suppress(FileNotFoundError):
        os.unlink(socket_path)  # left by a worker of this index that died
    await web.UnixSite(runner, socket_path).start()
    return runner


def _watch_supervisor(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Set `stop` when stdin reaches end of file: the supervisor closed it or died."""
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            _supervisor_gone(stop)

    loop.add_reader(fd, readable)


def _supervisor_gone(stop: asyncio.Event) -> None:
    if not stop.is_set():
        log.warning("the supervisor is gone; stopping")
        stop.set()


if __name__ == "__main__":
    sys.exit(main())
