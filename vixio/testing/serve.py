"""`vixio serve` as users run it, in its own process group, for tests and benchmarks.

    serve = await start_serve(tmp_path, llm, "--workers", "2")   # llm: a ScriptedLLMServer, or None
    try:
        await serve.wait_ready()
        async with SimulatedDevice(ws_url=serve.ws_url) as device: ...
        await until(condition, 10, "the device to show in the console")
    finally:
        await serve.stop()                                         # SIGTERM, then the whole group

The config is written to `tmp_path/config.yaml` with free ports on 127.0.0.1 and no idle timeout;
`xiaozhi=` adds keys under `xiaozhi:` (e.g. `"pairing: {trust_mac: true}"`), `server=` under `server:`
(e.g. `"instance: a"`), `extra=` appends
top-level YAML. Without an LLM the workers run no voice stack (fast to start; nothing answers).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from vixio.testing.llm_server import ScriptedLLMServer

STARTUP_TIMEOUT = 180.0
"""Two workers importing litellm and loading espeak on a loaded 2-core machine."""
STOP_LOG_LINES = 80
"""Lines of a serve's output a stop that timed out reports (what it was still waiting for)."""

OTA_LINE = re.compile(r"Put this OTA URL into your device: (http://\S+)")
WS_LINE = re.compile(r"WebSocket server on [\d.]+:(\d+) ")

T = TypeVar("T")


class ServeProcess:
    """A running `vixio serve`, its log in a file."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log
        self.ota_url = ""

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def wait_ready(self) -> str:
        """Wait for the banner's OTA URL (the HTTP port answers then); fail with the log if it exits."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            found = OTA_LINE.search(self.text())
            if found:
                self.ota_url = found.group(1)
                return self.ota_url
            if self.process.returncode is not None:
                raise AssertionError(f"vixio serve exited with {self.process.returncode}:\n{self.text()}")
            await asyncio.sleep(0.2)
        raise AssertionError(f"vixio serve did not print its OTA URL in {STARTUP_TIMEOUT} s:\n{self.text()}")

    @property
    def base_url(self) -> str:
        """The HTTP port's root, e.g. http://127.0.0.1:8003 (after `wait_ready`)."""
        return self.ota_url.split("/xiaozhi/")[0]

    @property
    def ws_url(self) -> str:
        """The devices' WebSocket URL, from the banner (after `wait_ready`)."""
        port = WS_LINE.search(self.text())
        assert port is not None, self.text()
        return f"ws://127.0.0.1:{port.group(1)}/xiaozhi/v1/"

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics.json"

    async def metrics(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(self.metrics_url) as response:
            assert response.status == 200
            values: dict[str, Any] = await response.json()
            return values

    def kill_group(self) -> None:
        """SIGKILL the supervisor and every worker (they share its process group)."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the supervisor stops its workers), then the whole group if it lingers."""
        with suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            lines = self.text().splitlines()[-STOP_LOG_LINES:]
            raise AssertionError(
                f"vixio serve did not stop within {timeout:g} s of SIGTERM; its last lines:\n" + "\n".join(lines)
            ) from None
        finally:
            self.kill_group()
            await self.process.wait()


def serve_config(
    llm: ScriptedLLMServer | None = None,
    *,
    xiaozhi: str = "",
    extra: str = "",
    vision: bool = False,
    server: str = "",
    http: str = "",
) -> str:
    """The YAML `start_serve` runs: free loopback ports, espeak TTS, the scripted LLM if given."""
    voice = (
        ""
        if llm is None
        else f"""
agent:
  provider: litellm
  model: openai/test-model
  api_base: {llm.base_url}
  api_key: test
  timeout: 20
tts:
  provider: espeak
  voice: en-us
"""
    )
    if vision and llm is not None:
        voice += f"""
vision:
  model: openai/test-vlm
  api_base: {llm.base_url}
  api_key: test
"""
    return f"""
xiaozhi:
  host: 127.0.0.1
  port: 0
  idle_timeout: 0
  http: {{host: 127.0.0.1, port: 0{", " + http if http else ""}}}
{textwrap.indent(textwrap.dedent(xiaozhi).strip(), "  ") if xiaozhi.strip() else ""}
server:
  shutdown_timeout: 20
{textwrap.indent(textwrap.dedent(server).strip(), "  ") if server.strip() else ""}
{voice}{textwrap.dedent(extra)}"""


async def start_serve(
    tmp_path: Path,
    llm: ScriptedLLMServer | None = None,
    *args: str,
    xiaozhi: str = "",
    extra: str = "",
    vision: bool = False,
    server: str = "",
    cpus: set[int] | None = None,
    http: str = "",
) -> ServeProcess:
    """Start `python -m vixio serve` on `serve_config(...)` with `args` (e.g. "--workers", "2");
    `cpus`: the cores it may run on (as a machine or a container of that many cores would)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        serve_config(llm, xiaozhi=xiaozhi, extra=extra, vision=vision, server=server, http=http), encoding="utf-8"
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vixio",
            "serve",
            "--config",
            str(config),
            *args,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)),
        )
    return ServeProcess(process, log)


async def until(condition: Callable[[], Awaitable[T]], timeout: float, what: str) -> T:
    """Poll `condition` every 0.25 s until it returns something truthy, which is returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await condition()
        if value:
            return value
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False
