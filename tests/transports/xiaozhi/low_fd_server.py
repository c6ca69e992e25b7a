"""A vixio server process with a low open-file limit, for the accept-error test.

Usage: python -m tests.transports.xiaozhi.low_fd_server <nofile> <keepalive_timeout>
Prints "PORTS <ws> <http>" once listening, logs to stderr, serves until terminated.
"""

from __future__ import annotations

import asyncio
import resource
import sys


async def main(keepalive_timeout: float) -> None:
    from loguru import logger

    from vixio.app.server import VixioServer
    from vixio.config.models import VixioConfig
    from vixio.core.pipeline import Pipeline
    from vixio.transports.xiaozhi.websocket.transport import DeviceContext

    logger.remove()
    logger.add(sys.stderr, level="INFO")
    logger.enable("vixio")  # importing vixio leaves its log off until an application turns it on
    # Caps above the descriptor limit, so accept() itself fails.
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "idle_timeout": 0,
                "max_connections": 5000,
                "http": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "max_connections": 5000,
                    "keepalive_timeout": keepalive_timeout,
                },
            }
        }
    )

    async def factory(context: DeviceContext) -> Pipeline:
        return Pipeline([], session_id=context.session_id)

    server = VixioServer(config, factory)
    await server.start()
    print(f"PORTS {server.transport.port} {server.ota.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
    asyncio.run(main(float(sys.argv[2])))
