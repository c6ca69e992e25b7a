"""How many workers `vixio serve` runs, and the WebSocket port they share.

One worker per core the process may use (a container's CPU quota counts), on Linux; the
supervisor listens on the WebSocket port and hands each device to a worker (dispatch.py).
"""

from __future__ import annotations

import math
import os
import socket
import sys
from contextlib import suppress


def reuse_port_supported() -> bool:
    """Several workers are supported (Linux: where they are tested)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def cpu_count(cgroup_cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """Cores this process may use: the CPUs it may run on, capped by a container's CPU quota
    (cgroup v2 `cpu.max`, e.g. `docker run --cpus 2`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with suppress(OSError, ValueError):  # no cgroup v2 limit here
        with open(cgroup_cpu_max, encoding="ascii") as limit:
            quota, period = limit.read().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    return max(1, cores)


def resolve_workers(requested: int | None) -> int:
    """`requested` (from `--workers` or `server.workers`), or one per core where that works."""
    if requested is None:
        return cpu_count() if reuse_port_supported() else 1
    if requested > 1 and not reuse_port_supported():
        raise ValueError(f"server.workers is {requested}, but several workers run on Linux only; use 1 on this system")
    return requested


def listen_port(host: str, port: int, backlog: int = socket.SOMAXCONN) -> socket.socket:
    """The supervisor's listening socket on `host:port` (port 0 picks one), where it accepts
    devices for the workers (vixio/serve/dispatch.py). A listener already on the port (another
    program, or another vixio) makes this fail with EADDRINUSE: no SO_REUSEPORT, so nothing is
    silently shared."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart is not refused by TIME_WAIT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio's create_server
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


SPARE_DESCRIPTORS = 256
"""Descriptors a worker needs beside its devices' sockets: model files, the store, HTTP clients, logs."""


def raise_open_file_limit(max_connections: int) -> str | None:
    """Raise this process's soft open-file limit to its hard limit (workers inherit it): every
    connected device holds a descriptor, and services often start with a soft limit of 1,024, which
    a worker holding thousands of silent devices would hit (accept() then fails). Returns a warning
    when `max_connections` (xiaozhi.max_connections, per worker) and the spare do not fit even so."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and max_connections + SPARE_DESCRIPTORS > soft:
        return (
            f"xiaozhi.max_connections is {max_connections} per worker, but this process may open only {soft} "
            f"files (its hard limit): devices past ~{max(0, soft - SPARE_DESCRIPTORS)} will fail to connect; "
            "raise the limit (ulimit -n, systemd LimitNOFILE, Compose ulimits.nofile) or lower max_connections"
        )
    return None
