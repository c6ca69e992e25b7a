"""What one process reports about itself: `/metrics` (Prometheus text, vixio/metrics/),
`/metrics.json` (live sessions and the latency marks of their recent turns) and, in a worker, the
samples the supervisor merges (vixio/metrics/merge.py, vixio/serve/metrics_routes.py).

Session and device ids are for operators (`xiaozhi.http.admin_token`); a worker answers on its
private socket, where the supervisor has already checked the caller.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aiohttp import web

from vixio import metrics
from vixio.core.batching import worker_stats

if TYPE_CHECKING:
    from vixio.app.server import VixioServer


def rss_mb() -> float | None:
    """This process's resident memory in MB (Linux /proc), or None where that is not available."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


class ProcessReport:
    """The HTTP handlers and the snapshot behind them, for one `VixioServer`."""

    def __init__(self, server: VixioServer) -> None:
        self._server = server

    async def prometheus(self, request: web.Request) -> web.Response:
        """This process's series in the Prometheus text format; for operators (`xiaozhi.http.admin_token`)."""
        server = self._server
        if server.serve_http and (refusal := server.ota.admin.check(request)) is not None:
            return refusal
        families = metrics.local_families() + metrics.worker_families(ready=1, restarted=0)
        return web.Response(body=metrics.render(families), headers={"Content-Type": metrics.CONTENT_TYPE})

    async def samples(self, request: web.Request) -> web.Response:
        """This worker's series for the supervisor's `/metrics` (vixio/metrics/merge.py)."""
        return web.json_response(metrics.samples_json())

    async def json(self, request: web.Request) -> web.Response:
        """`snapshot()` for operators; anyone else gets the count."""
        server = self._server
        if server.serve_http and not server.ota.admin.is_operator(request):
            return web.json_response(
                {
                    "sessions": len(server.transport.connections),
                    "detail": [],
                    "note": "details need the operator token (xiaozhi.http.admin_token); "
                    "without one configured, ask from this machine",
                }
            )
        return web.json_response(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """Live sessions and the latency marks of their recent turns (ms from the first mark),
        plus this process as the one entry of `workers` (the supervisor merges several)."""
        server = self._server
        sessions: list[dict[str, Any]] = []
        for session_id, connection in server.transport.connections.items():
            session = connection.session
            turns = (
                []
                if session is None
                else [{"turn": turn.turn_id, "ms": turn.durations()} for turn in session.state.turns]
            )
            tools = server.tools.get(session_id)
            sessions.append(
                {
                    "session_id": session_id,
                    "device_id": connection.device_id,
                    "speaking": connection.speaking,
                    "turns": turns,
                    "tools": tools.toolset.sources() if tools is not None else {},
                }
            )
        process = {
            "worker": server.worker_index,
            "pid": os.getpid(),
            "sessions": len(sessions),
            "rss_mb": rss_mb(),
            "batching": worker_stats(),
        }
        return {"sessions": len(sessions), "detail": sessions, "workers": [process]}
