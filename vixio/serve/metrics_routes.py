"""The supervisor's `/metrics` (Prometheus text) and `/metrics.json` (the JSON view), from every worker.

`/metrics` asks each ready worker for its samples (`GET /metrics/samples` on its private
socket) and renders their sum with the supervisor's own (store errors of the OTA port) and what
only the supervisor knows: workers ready and restarted (vixio/metrics/merge.py says how a
restarted worker's counts stay in the sum). `/metrics.json` lists every worker's sessions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aiohttp import web

from vixio import metrics
from vixio.app.process_report import rss_mb
from vixio.fleet.peers import PeerReply, Peers, worker_number
from vixio.metrics.merge import Family

if TYPE_CHECKING:
    from vixio.serve.lifecycle import WorkerProcess


class InstanceMetrics:
    """The two metrics routes of the HTTP port with workers."""

    def __init__(self, workers: list[WorkerProcess], peers: Peers) -> None:
        self.workers = workers
        self.peers = peers
        self.samples = metrics.FleetSamples()

    async def prometheus(self, request: web.Request) -> web.Response:
        answered = []
        for reply in await self.peers.gather("GET", metrics.SAMPLES_PATH, local=True):  # this instance's
            if reply.ok and isinstance(reply.body, dict):
                families = [Family.from_json(family) for family in reply.body.get("families", [])]
                self.samples.update(worker_number(reply.worker), reply.body.get("pid"), families)
                answered.append(worker_number(reply.worker))
        extra = metrics.worker_families(
            ready=sum(1 for w in self.workers if w.ready), restarted=sum(w.restarts for w in self.workers)
        )
        body = metrics.render(self.samples.families(answered, metrics.local_families(), extra))
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def json(self, request: web.Request) -> web.Response:
        """Every worker's sessions, and per worker: pid, sessions, RSS, restarts."""
        return web.json_response(
            merge_metrics(self.workers, await self.peers.gather("GET", metrics.JSON_PATH, local=True))
        )


def merge_metrics(workers: list[WorkerProcess], replies: list[PeerReply]) -> dict[str, Any]:
    """One `/metrics.json` body from the workers' own: sessions tagged with their worker, a line per
    worker (also one that is restarting or did not answer), and the supervisor's own RSS."""
    by_worker = {worker_number(reply.worker): reply for reply in replies}
    detail: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    for worker in workers:
        reply = by_worker.get(worker.index)
        extra = {"restarts": worker.restarts}
        if reply is not None and reply.ok and isinstance(reply.body, dict):
            detail += [{**session, "worker": worker.index} for session in reply.body.get("detail", [])]
            lines += [{**line, "status": "up", **extra} for line in reply.body.get("workers", [])]
        else:
            status = "starting" if worker.running and not worker.ready else "down"
            if reply is not None:
                status = "not answering"
            lines.append(
                {"worker": worker.index, "pid": worker.pid, "sessions": None, "rss_mb": None, "status": status, **extra}
            )
    total_rss = sum(line["rss_mb"] or 0 for line in lines) + (rss_mb() or 0)
    return {
        "sessions": len(detail),
        "detail": detail,
        "workers": lines,
        "supervisor": {"pid": os.getpid(), "rss_mb": rss_mb()},
        "rss_mb": round(total_rss, 1),
    }
