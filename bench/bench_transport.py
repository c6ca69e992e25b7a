"""Xiaozhi transport benchmarks (not a test): run `python bench/bench_transport.py`.

The server runs in its own process so its CPU time is measured alone (from /proc), and the
clients are raw WebSocket connections in this process.

1. uplink: CPU per 60 ms Opus frame for decode + routing into the pipeline (20 sessions streaming)
2. idle: 200 connected idle devices: server CPU per second and resident memory
3. downlink: frame spacing seen by 100 devices receiving speech at once (p50/p99, after the
   pre-buffer)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vixio.transports.xiaozhi.protocol.codec import OpusEncoder  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


# --- the server process -----------------------------------------------------------------------


async def run_server(port: int, reply_seconds: float) -> None:
    from vixio.app.log import setup_logging
    from vixio.app.server import VixioServer
    from vixio.config.models import VixioConfig
    from vixio.core.chunk import AudioChunk, Chunk, StreamCompleteChunk, TextChunk
    from vixio.core.pipeline import Pipeline
    from vixio.core.station import Station

    setup_logging("WARNING")
    rate = 24000
    t = np.arange(int(reply_seconds * rate)) / rate
    speech = (np.sin(2 * np.pi * 220 * t) * 6000).astype("<i2").tobytes()

    class Speak(Station):
        """Answers typed text with `reply_seconds` of audio, like a TTS would, in 0.5 s chunks."""

        handles = (TextChunk,)

        async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
            assert isinstance(chunk, TextChunk)
            yield chunk
            if chunk.role == "user":
                yield TextChunk(text="Here is the answer.", role="assistant")
                step = rate  # 0.5 s of int16
                for i in range(0, len(speech), step):
                    yield AudioChunk(pcm=speech[i : i + step], sample_rate=rate, role="assistant")
                yield StreamCompleteChunk(source="Speak")

    async def factory(context):
        return Pipeline([Speak()], session_id=context.session_id)

    config = VixioConfig.model_validate(
        {"xiaozhi": {"host": "127.0.0.1", "port": port, "idle_timeout": 0, "http": {"host": "127.0.0.1", "port": 0}}}
    )
    async with VixioServer(config, factory):
        print("ready", flush=True)
        await asyncio.Event().wait()


# --- the client side ----------------------------------------------------------------------------


class ServerProcess:
    def __init__(self, port: int, reply_seconds: float = 3.0) -> None:
        self.port = port
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--server", str(port), "--reply-seconds", str(reply_seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("server did not start")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


async def connect(port: int, index: int) -> websockets.ClientConnection:
    ws = await websockets.connect(
        f"ws://127.0.0.1:{port}/xiaozhi/v1/",
        additional_headers={
            "Device-Id": f"02:00:00:00:{index // 256:02x}:{index % 256:02x}",
            "Client-Id": f"bench-{index}",
            "Protocol-Version": "1",
        },
        max_size=2**20,
        compression=None,
    )
    await ws.send(
        json.dumps(
            {
                "type": "hello",
                "version": 1,
                "features": {"mcp": True},
                "transport": "websocket",
                "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
            }
        )
    )
    hello = json.loads(await ws.recv())
    assert hello["transport"] == "websocket"
    return ws


async def bench_uplink(port: int, server: ServerProcess, sessions: int = 20, seconds: float = 10.0) -> None:
    encoder = OpusEncoder(16000)
    t = np.arange(960) / 16000
    frames = [encoder.encode((np.sin(2 * np.pi * f * t) * 5000).astype("<i2").tobytes()) for f in range(200, 1200, 50)]
    sockets = [await connect(port, i) for i in range(sessions)]
    for ws in sockets:
        await ws.send(json.dumps({"type": "listen", "state": "start", "mode": "auto"}))
    count = int(seconds / 0.060)
    before = server.cpu_seconds()
    started = time.monotonic()

    async def stream(ws: websockets.ClientConnection) -> None:
        for i in range(count):
            await ws.send(frames[i % len(frames)])
            await asyncio.sleep(max(0.0, started + (i + 1) * 0.060 - time.monotonic()))

    await asyncio.gather(*(stream(ws) for ws in sockets))
    await asyncio.sleep(0.5)
    used = server.cpu_seconds() - before
    for ws in sockets:
        await ws.close()
    per_frame_ms = used / (count * sessions) * 1000
    print(
        f"uplink: {sessions} sessions x {count} frames real-time: server CPU {used:.2f} s "
        f"= {per_frame_ms:.3f} ms per 60 ms frame (decode + routing + WebSocket)"
    )


async def bench_idle(port: int, server: ServerProcess, devices: int = 200, seconds: float = 10.0) -> None:
    rss_before = server.rss_mib()
    sockets = [await connect(port, 1000 + i) for i in range(devices)]
    before = server.cpu_seconds()
    await asyncio.sleep(seconds)
    used = server.cpu_seconds() - before
    alive = sum(1 for ws in sockets if ws.state.name == "OPEN")
    print(
        f"idle: {alive}/{devices} devices connected for {seconds:.0f} s: server CPU {used / seconds * 100:.1f}% of a core, "
        f"RSS {server.rss_mib():.0f} MiB ({(server.rss_mib() - rss_before) / devices * 1024:.0f} KiB per session)"
    )
    for ws in sockets:
        await ws.close()


async def bench_downlink(port: int, server: ServerProcess, sessions: int = 100) -> None:
    sockets = [await connect(port, 2000 + i) for i in range(sessions)]
    arrivals: list[list[float]] = [[] for _ in sockets]

    async def listen(index: int, ws: websockets.ClientConnection) -> None:
        await ws.send(json.dumps({"type": "listen", "state": "detect", "text": "tell me something"}))
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                arrivals[index].append(time.monotonic())
            elif json.loads(message).get("state") == "stop":
                return

    before = server.cpu_seconds()
    started = time.monotonic()
    await asyncio.gather(*(listen(i, ws) for i, ws in enumerate(sockets)))
    wall = time.monotonic() - started
    used = server.cpu_seconds() - before
    gaps = []
    for times in arrivals:
        steady = times[5:]  # after the pre-buffer
        gaps.extend((b - a) * 1000 for a, b in zip(steady, steady[1:]))
    gaps.sort()
    p = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))]  # noqa: E731
    within = sum(1 for g in gaps if 40 <= g <= 80) / len(gaps) * 100
    print(
        f"downlink: {sessions} sessions speaking {len(arrivals[0])} frames each at once: spacing "
        f"p1 {p(0.01):.1f} / p50 {statistics.median(gaps):.1f} / p99 {p(0.99):.1f} ms "
        f"({within:.1f}% within 60±20 ms); server CPU {used / wall * 100:.0f}% of a core over {wall:.1f} s"
    )
    for ws in sockets:
        await ws.close()


async def main() -> None:
    port = 18765
    server = ServerProcess(port)
    try:
        await bench_uplink(port, server)
        await bench_idle(port, server)
        await bench_downlink(port, server)
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", type=int)
    parser.add_argument("--reply-seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.server:
        asyncio.run(run_server(args.server, args.reply_seconds))
    else:
        asyncio.run(main())
