"""The fakes process and the `vixio serve` process of bench/bench_capacity.py."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import websockets
import yaml

from capacity.procs import Children, ProcessTree

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 120.0
"""Loading Silero, litellm and openai-agents on a busy 2-core machine can take a while."""


def start_fakes(
    children: Children, env: dict[str, str], delays: tuple[float, float] = (0.0, 0.0)
) -> tuple[str, ProcessTree]:
    """Start bench/capacity/fakes.py, answering after `delays` (seconds to the model's first token,
    to the first TTS audio); returns its base URL (`http://127.0.0.1:<port>/v1`) and process."""
    waits = ["--first-token-ms", str(1000 * delays[0]), "--first-audio-ms", str(1000 * delays[1])]
    proc = children.start(
        [sys.executable, str(BENCH / "capacity" / "fakes.py"), *waits],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the fakes process exited ({proc.wait()}) before listening")
    return f"http://127.0.0.1:{json.loads(line)['port']}/v1", ProcessTree(proc.pid)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_config(
    ws_port: int,
    http_port: int,
    fakes_url: str,
    log_level: str,
    state_path: Path,
    memory: bool = True,
    overrides: dict[str, Any] | None = None,
    voice: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A vixio config using the fakes for ASR, LLM and TTS, and real Silero VAD; the state store
    (SQLite) at `state_path` (the benchmark's temporary folder, never the checkout), conversations
    stored in it when `memory` (memory.enabled). `overrides` is merged in key by key (e.g.
    `{"state": {"backend": "redis", "url": ...}}`, `{"xiaozhi": {"max_connections": 20000}}`);
    `voice` sections replace the fakes' whole (`shipped_voice_stack()`: the local models)."""
    return merge_config(
        {
            "log": {"level": log_level},
            "state": {"path": str(state_path)},
            "memory": {"enabled": memory},
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": ws_port,
                "idle_timeout": 0,
                "http": {"host": "127.0.0.1", "port": http_port},
                # Raised so --isolation's 600-tool registration and 1,000-tool listing are processed,
                # not refused (the defaults refuse them: docs/security.md); ordinary load never nears them.
                "mcp": {
                    "limits": {
                        "tools_per_source": 1000,
                        "tools_per_session": 2000,
                        "registrations_per_minute": 1000,
                        "schema_bytes": 100000,
                    }
                },
            },
            "vad": {"provider": "silero-onnx"},
            "asr": {
                "provider": "openai",
                "api_base": fakes_url,
                "api_key": "bench",
                "model": "whisper-1",
                "language": "en",
            },
            "agent": {"provider": "litellm", "model": "openai/bench", "api_base": fakes_url, "api_key": "bench"},
            "tts": {
                "provider": "openai",
                "api_base": fakes_url,
                "api_key": "bench",
                "response_format": "pcm",
                "sample_rate": 24000,
            },
        }
        | (voice or {}),
        overrides or {},
    )


VOICE_SECTIONS = ("vad", "turn", "asr", "agent", "tts", "speech")


def shipped_voice_stack() -> dict[str, Any]:
    """The voice sections of the checkout's config.yaml (the offline default: local models), as
    overrides of `server_config`: each replaces the fakes' section whole."""
    shipped = yaml.safe_load((ROOT / "config.yaml").read_text())
    return {section: shipped[section] for section in VOICE_SECTIONS if section in shipped}


def merge_config(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in: mappings key by key, anything else replaced."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_config(merged[key], value)
        else:
            merged[key] = value
    return merged


def serve_supports_workers(env: dict[str, str]) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "vixio", "serve", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "--workers" in out.stdout


class ServerUnderLoad:
    """What the benchmarks read of the server(s) under load: its devices' URL, its processes
    (`tree`), its logs (`log_paths`) and its workers in all (for the warm-up)."""

    ws_url: str
    tree: ProcessTree
    workers: int | None
    log_paths: list[Path]

    def log_problems(self) -> dict[str, int]:
        """WARNING and ERROR lines (and tracebacks) in the server's log so far."""
        counts = {"warnings": 0, "errors": 0}
        for line in self._log_lines():
            if "| WARNING |" in line:
                counts["warnings"] += 1
            elif "| ERROR   |" in line or "| CRITICAL|" in line or line.startswith("Traceback"):
                counts["errors"] += 1
        return counts

    def turn_marks(self) -> list[dict[str, float]]:
        """Each spoken turn's latency marks from the server's log (ms from `speech_end`, the
        moment the VAD decided the speech had ended): where the server's part of a turn went."""
        marks = []
        for line in self._log_lines():
            _, found, text = line.partition("latency (ms from first mark): ")
            if found:
                with contextlib.suppress(ValueError, SyntaxError):
                    turn = ast.literal_eval(text.strip())
                    if isinstance(turn, dict) and "speech_end" in turn:
                        marks.append(turn)
        return marks

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_paths[-1].read_text(errors="replace").splitlines()[-lines:])

    def _log_lines(self) -> list[str]:
        return [line for path in self.log_paths for line in path.read_text(errors="replace").splitlines()]

    def wait_quiet(self, deadline: float) -> None:
        """Until the server tree uses under 5 % of a core for a second: with workers, the first
        hello may come from one worker while the others still load their models."""
        quiet_since, last = None, self.tree.usage()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.tree.usage()
            busy = (now.cpu_s - last.cpu_s) / max(1e-3, now.time - last.time)
            last = now
            if busy >= 0.05:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now.time
            elif now.time - quiet_since >= 1.0:
                return

    def warm_up(self) -> None:
        """A typed turn up to its first audio, so first-use costs (imports, connection pools) are not timed;
        with workers, two turns per worker at once, so the kernel's spread likely reaches them all."""
        sessions = 2 * self.workers if self.workers else 1
        asyncio.run(_typed_turns(self.ws_url, "What is the weather today?", sessions))
        self.wait_quiet(time.monotonic() + 30.0)  # the warm-up sessions' replies and closing are done


class VixioServerProcess(ServerUnderLoad):
    """`python -m vixio serve` of this checkout, on free loopback ports, logging to a file."""

    def __init__(
        self,
        children: Children,
        tmp: Path,
        fakes_url: str,
        env: dict[str, str],
        *,
        workers: int | None = None,
        log_level: str = "INFO",
        memory: bool = True,
        overrides: dict[str, Any] | None = None,
        voice: dict[str, Any] | None = None,
    ) -> None:
        self.children = children
        self.ws_port, self.http_port = free_port(), free_port()
        self.ws_url = f"ws://127.0.0.1:{self.ws_port}/xiaozhi/v1/"
        self.config_path = tmp / f"server-{self.ws_port}.yaml"
        self.log_path = tmp / f"server-{self.ws_port}.log"
        self.log_paths = [self.log_path]
        state_path = tmp / f"state-{self.ws_port}.db"
        self.config_path.write_text(
            yaml.safe_dump(
                server_config(self.ws_port, self.http_port, fakes_url, log_level, state_path, memory, overrides, voice)
            )
        )
        self.env = env
        self.workers: int | None = None
        if workers is not None:
            if serve_supports_workers(env):
                self.workers = workers
            else:
                print(f"note: `vixio serve` has no --workers here; --workers {workers} ignored", file=sys.stderr)
        self.proc: subprocess.Popen[Any] | None = None
        self.tree = ProcessTree(0)

    def __enter__(self) -> VixioServerProcess:
        args = [sys.executable, "-m", "vixio", "serve", "--config", str(self.config_path)]
        if self.workers is not None:
            args += ["--workers", str(self.workers)]
        self._log = self.log_path.open("wb")
        self.proc = self.children.start(args, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        self.tree = ProcessTree(self.proc.pid)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is not None:
            self.children.stop(self.proc)
            self.proc = None
        self._log.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"vixio serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                asyncio.run(_hello(self.ws_url))
            except (OSError, TimeoutError, websockets.WebSocketException):
                time.sleep(0.5)
                continue
            self.wait_quiet(deadline)
            return
        raise RuntimeError(f"vixio serve not answering a hello after {READY_TIMEOUT_S:g} s:\n{self.log_tail()}")


async def _hello(url: str) -> None:
    async with websockets.connect(
        url,
        additional_headers={"Device-Id": "02:00:00:00:00:ff", "Protocol-Version": "1", "Client-Id": "bench-ready"},
        open_timeout=5,
    ) as ws:
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "version": 1,
                    "transport": "websocket",
                    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
                }
            )
        )
        while True:
            message = await asyncio.wait_for(ws.recv(), 5)
            if isinstance(message, str) and json.loads(message).get("type") == "hello":
                return


async def _typed_turns(url: str, text: str, sessions: int, timeout: float = 60.0) -> None:
    from vixio.testing.register_client import RegisterClient

    async def one(index: int) -> None:
        async with RegisterClient(url, device_id=f"02:00:00:00:01:{index:02x}") as client:
            await client.send_text(text)
            async with asyncio.timeout(timeout):
                while client.audio_frames == 0:  # the first answer audio: agent and TTS have run
                    await asyncio.sleep(0.02)

    await asyncio.gather(*(one(i) for i in range(sessions)))
