"""N `vixio serve` instances behind HAProxy on loopback, with the shipped deploy/haproxy.cfg.

    async with Fleet(tmp_path, llm, instances=2) as fleet:        # HAProxy + 2 instances
        async with SimulatedDevice(ota_url=fleet.ota_url) as device:
            await device.send_text("hi")                           # through HAProxy to one instance
            holder = await fleet.holding(device.device_id)         # the instance that has it
            holder.kill_group()                                    # kill -9 (supervisor and workers)

Each instance is `vixio serve` in its own folder (`tmp_path/vixio1`, ...) with `xiaozhi.public_url`
naming HAProxy's WebSocket port, so OTA hands devices the balancer, not the instance. `extra=`
adds top-level YAML to every instance (e.g. `state: {backend: redis, url: ...}`); without it each
instance has its own SQLite file. HAProxy's config is deploy/haproxy.cfg with only its listening
ports and the instances' addresses replaced (`haproxy_config`). `haproxy_path()` finds the binary;
a test without it skips naming the Debian package (`scripts/ensure_test_packages.sh` installs it).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
from contextlib import suppress
from pathlib import Path
from types import TracebackType

import aiohttp

from vixio.testing.llm_server import ScriptedLLMServer
from vixio.testing.serve import ServeProcess, start_serve, until

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"
"""deploy/haproxy.cfg of this checkout."""
WEBSOCKET_PORT, HTTP_PORT = 8000, 8003
"""The ports the shipped config names (vixio's defaults)."""
MISSING = (
    "Debian package haproxy is not installed (apt-get install haproxy; as root `make test` installs it: "
    "scripts/ensure_test_packages.sh)"
)
_SERVER = re.compile(r"^(?P<indent>\s*)server vixio\d+ vixio\d+:(?P<port>\d+)(?P<rest>.*)$")


def haproxy_path() -> str | None:
    return shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None)


def free_port() -> int:
    """A port nothing listens on now (HAProxy needs its ports in its config)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def haproxy_config(shipped: str, *, websocket_port: int, http_port: int, instances: list[tuple[int, int]]) -> str:
    """`shipped` listening on 127.0.0.1 `websocket_port` / `http_port`, each backend's servers
    being `instances` ((WebSocket port, HTTP port) each, on 127.0.0.1) in place of vixio1, vixio2, ..."""
    text = shipped.replace(f"bind :{WEBSOCKET_PORT}\n", f"bind 127.0.0.1:{websocket_port}\n")
    text = text.replace(f"bind :{HTTP_PORT}\n", f"bind 127.0.0.1:{http_port}\n")
    out: list[str] = []
    written = False
    for line in text.splitlines():
        server = _SERVER.match(line)
        if server is None:
            written = False
            out.append(line)
            continue
        if written:  # the rest of this backend's block: replaced by the lines written for its first
            continue
        written = True
        websocket = int(server["port"]) == WEBSOCKET_PORT
        for number, (ws, http) in enumerate(instances, start=1):
            rest = server["rest"].replace(f"check port {HTTP_PORT}", f"check port {http}")
            out.append(f"{server['indent']}server vixio{number} 127.0.0.1:{ws if websocket else http}{rest}")
    if text.count(f"bind 127.0.0.1:{websocket_port}") != 1 or text.count(f"bind 127.0.0.1:{http_port}") != 1:
        raise ValueError("the HAProxy config no longer binds :8000 and :8003 as the fleet harness expects")
    return "\n".join(out) + "\n"


class HAProxy:
    """`haproxy -db` (foreground) on a config file, its log in a file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        binary = haproxy_path()
        if binary is None:
            raise RuntimeError(MISSING)
        with self.log.open("wb") as sink:
            self.process = await asyncio.create_subprocess_exec(
                binary, "-db", "-f", str(self.config), stdout=sink, stderr=sink, start_new_session=True
            )

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with suppress(ProcessLookupError):
            self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            with suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


class Fleet:
    """HAProxy in front of `instances` vixio instances, each with `workers` workers."""

    def __init__(
        self,
        directory: Path,
        llm: ScriptedLLMServer | None = None,
        *,
        instances: int = 2,
        workers: int = 1,
        xiaozhi: str = "",
        extra: str = "",
        shipped: Path = SHIPPED_CONFIG,
        pin: bool = False,
    ) -> None:
        """`pin`: instance k runs on core k-1 only (modulo the cores), as if each had a machine of
        its own; otherwise every instance sees every core and sizes its threads for all of them."""
        self.directory = directory
        self.pin = pin
        self.llm = llm
        self.count = instances
        self.workers = workers
        self.xiaozhi = xiaozhi
        self.extra = extra
        self.shipped = shipped
        self.websocket_port = 0
        self.http_port = 0
        self.instances: list[ServeProcess] = []
        self.haproxy: HAProxy | None = None

    @property
    def ota_url(self) -> str:
        """The OTA URL through HAProxy."""
        return f"http://127.0.0.1:{self.http_port}/xiaozhi/ota/"

    @property
    def ws_url(self) -> str:
        """The devices' WebSocket URL through HAProxy."""
        return f"ws://127.0.0.1:{self.websocket_port}/xiaozhi/v1/"

    async def start(self) -> None:
        if haproxy_path() is None:
            raise RuntimeError(MISSING)
        self.websocket_port, self.http_port = free_port(), free_port()
        xiaozhi = f"public_url: {self.ws_url}\n{self.xiaozhi}"
        for number in range(1, self.count + 1):
            folder = self.directory / f"vixio{number}"
            folder.mkdir(parents=True, exist_ok=True)
            extra = self.extra or f"state: {{path: {folder / 'state.db'}}}\n"
            # One host: each instance needs its own name in the fleet (elsewhere the host name is it).
            cores = sorted(os.sched_getaffinity(0))
            cpus = {cores[(number - 1) % len(cores)]} if self.pin else None
            self.instances.append(
                await start_serve(
                    folder,
                    self.llm,
                    "--workers",
                    str(self.workers),
                    xiaozhi=xiaozhi,
                    extra=extra,
                    server=f"instance: vixio{number}",
                    cpus=cpus,
                )
            )
        await asyncio.gather(*(instance.wait_ready() for instance in self.instances))
        config = self.directory / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                self.shipped.read_text(encoding="utf-8"),
                websocket_port=self.websocket_port,
                http_port=self.http_port,
                instances=[self.ports(i) for i in self.instances],
            ),
            encoding="utf-8",
        )
        self.haproxy = HAProxy(config, self.directory / "haproxy.log")
        await self.haproxy.start()
        await until(
            self._balancer_answers, 30, f"HAProxy answering on 127.0.0.1:{self.http_port}:\n{self.haproxy.text()}"
        )

    @staticmethod
    def ports(instance: ServeProcess) -> tuple[int, int]:
        """An instance's (WebSocket port, HTTP port), from its banner."""
        websocket = int(instance.ws_url.rsplit(":", 1)[1].split("/")[0])
        return websocket, int(instance.base_url.rsplit(":", 1)[1])

    async def _balancer_answers(self) -> bool:
        assert self.haproxy is not None and self.haproxy.process is not None
        if self.haproxy.process.returncode is not None:
            raise AssertionError(f"haproxy exited with {self.haproxy.process.returncode}:\n{self.haproxy.text()}")
        with suppress(aiohttp.ClientError, OSError):
            async with (
                aiohttp.ClientSession() as http,
                http.get(self.ota_url.replace("/xiaozhi/ota/", "/healthz")) as r,
            ):
                return r.status == 200
        return False

    async def holding(self, device_id: str) -> ServeProcess | None:
        """The instance with a live session of `device_id`, if any."""
        for instance in self.instances:
            if instance.process.returncode is not None:
                continue
            with suppress(aiohttp.ClientError, OSError, AssertionError):
                if any(s["device_id"] == device_id for s in (await instance.metrics())["detail"]):
                    return instance
        return None

    async def stop(self) -> None:
        if self.haproxy is not None:
            await self.haproxy.stop()
        await asyncio.gather(*(instance.stop() for instance in self.instances), return_exceptions=True)

    async def __aenter__(self) -> Fleet:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
