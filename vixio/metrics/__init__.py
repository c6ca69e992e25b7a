"""Counters an operator alerts on, and `/metrics` in the Prometheus text format.

Each process counts what happens in it (`instruments.py`: sessions, turns, turn latency, late
frames, quiet microphone windows the VAD skipped, provider and store errors). `/metrics` of an instance is the sum over its processes:

    worker w0 ── GET /metrics/samples (JSON, its private socket) ──┐
    worker w1 ── GET /metrics/samples ────────────────────────────┤  supervisor: FleetSamples sums
    supervisor's own samples (store errors, workers restarted) ───┘  → GET /metrics (Prometheus text)

Counters and histogram buckets are summed; a worker that exited keeps its last counts in the
sum, so no counter of the instance goes down when a worker restarts (`merge.py`). In one process
(`vixio serve` without workers) `/metrics` renders that process's samples the same way.
`/metrics.json` is the JSON view (live sessions and their latency marks, per worker RSS).
"""

from __future__ import annotations

from vixio.metrics.instruments import (
    ECHO_ERLE,
    ECHO_FRAMES,
    INTERRUPTIONS,
    LATE_FRAMES,
    SESSIONS,
    SESSIONS_STARTED,
    TURN_LATENCY,
    TURNS,
    VAD_QUIET_WINDOWS,
    count_provider_error,
    count_store_error,
    reply_ended,
)
from vixio.metrics.merge import (
    CONTENT_TYPE,
    JSON_PATH,
    PATH,
    SAMPLES_PATH,
    Family,
    FleetSamples,
    local_families,
    render,
    samples_json,
    worker_families,
)

__all__ = [
    "CONTENT_TYPE",
    "ECHO_ERLE",
    "ECHO_FRAMES",
    "INTERRUPTIONS",
    "JSON_PATH",
    "LATE_FRAMES",
    "PATH",
    "SAMPLES_PATH",
    "SESSIONS",
    "SESSIONS_STARTED",
    "TURNS",
    "TURN_LATENCY",
    "VAD_QUIET_WINDOWS",
    "Family",
    "FleetSamples",
    "count_provider_error",
    "count_store_error",
    "local_families",
    "render",
    "reply_ended",
    "samples_json",
    "worker_families",
]
