"""A real `redis-server` on a free loopback port, its files in a temporary folder, for tests and benchmarks.

    server = RedisServer.start(tmp_path)      # skips nothing itself: `missing()` says what to install
    store = RedisStore(server.url, prefix="test:")
    server.stop()                             # SIGTERM: what an operator's restart does
    server.restart()                          # the same port again, empty (no persistence)
    server.close()

Nothing is saved to disk (`--save ""`, no AOF): a restart comes back empty, as a cache-only
Redis would, which is the harder case for vixio. `requirepass` starts it with a password.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

FLEET_SECRET = "fleet-secret-of-the-tests-0123456789"
"""`state.fleet_secret` of the fleets tests and benchmarks start (a fleet refuses to start without one)."""
PACKAGE = "redis-server"
"""The Debian package (and binary) tests need; `make test` installs it as root (scripts/ensure_test_packages.sh)."""


def missing() -> str | None:
    """Why the server cannot run here (a sentence naming the package), or None."""
    if shutil.which("redis-server") is None:
        return f"Debian package {PACKAGE} is not installed (apt-get install {PACKAGE})"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PortTaken(RuntimeError):
    """redis-server could not bind its port: another process holds it."""


class RedisServer:
    """One `redis-server` process; `url` stays the same across `restart()`."""

    def __init__(self, folder: Path, port: int, requirepass: str | None = None) -> None:
        self.folder = folder
        self.port = port
        self.requirepass = requirepass
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, folder: Path, requirepass: str | None = None) -> RedisServer:
        folder.mkdir(parents=True, exist_ok=True)
        # The free port is free when probed, not when redis binds it: under parallel tests another
        # worker's server may take it in between; redis then exits, and a new port is tried.
        for attempt in range(5):
            server = cls(folder, free_port(), requirepass)
            try:
                server.restart()
                return server
            except PortTaken:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self, timeout: float = 10.0) -> None:
        """Start it (again) on its port and wait until it answers."""
        if self.running:
            self.stop()
        command = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
            "--logfile",
            str(self.folder / "redis.log"),
        ]
        if self.requirepass is not None:
            command += ["--requirepass", self.requirepass]
        deadline = time.monotonic() + timeout
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            if self._serving():
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (
                    (self.folder / "redis.log").read_text(errors="replace")[-400:]
                    if (self.folder / "redis.log").exists()
                    else ""
                )
                self.close()
                error = PortTaken if "Address already in use" in log else RuntimeError
                raise error(f"redis-server on port {self.port} did not start: {log}")
            time.sleep(0.02)

    def _serving(self) -> bool:
        """This process answers on the port (not another test's server that took the port first)."""
        assert self.process is not None
        auth = b""
        if self.requirepass is not None:  # RESP, not an inline command: a password may hold spaces
            password = self.requirepass.encode()
            auth = b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(password), password)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as probe:
                probe.sendall(auth + b"INFO server\r\n")
                answer = b""
                while b"process_id:" not in answer or not answer.endswith(b"\r\n"):
                    piece = probe.recv(4096)
                    if not piece:
                        return False
                    answer += piece
        except OSError:
            return False
        pid = answer.split(b"process_id:", 1)[1].split(b"\r\n", 1)[0]
        return pid.strip() == str(self.process.pid).encode()

    def stop(self) -> None:
        """SIGTERM and wait: the port is closed when this returns."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def close(self) -> None:
        self.stop()
        self.process = None
