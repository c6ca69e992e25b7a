"""Voice pipeline benchmarks (not a test): `python bench/bench_pipeline.py [--offline]`.

1. overhead: with zero-latency providers (an agent and a TTS that answer at once), the time from
   the end of the user's turn (a typed utterance arriving) to the first downlink Opus frame on the
   device's socket, with 1 and with 100 sessions at once (p50/p95).
2. --offline: the shipped offline stack (Silero, Whisper tiny.en, SmolLM2, Piper) on a short
   spoken question: end of speech (the VAD's decision) → first downlink frame, per step.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vixio.app.log import setup_logging  # noqa: E402
from vixio.app.server import VixioServer  # noqa: E402
from vixio.config import load_config  # noqa: E402
from vixio.config.models import VixioConfig  # noqa: E402
from vixio.core.pipeline import Pipeline  # noqa: E402
from vixio.providers.agent.base import AgentEvent, AgentProvider, AgentTextDelta  # noqa: E402
from vixio.providers.tts.base import TTSProvider  # noqa: E402
from vixio.stations import AgentStation, SentenceAggregatorStation, TextAggregatorStation, TTSStation  # noqa: E402


class InstantAgent(AgentProvider):
    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: str = "") -> None: ...

    async def chat(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        yield AgentTextDelta(text="Sure. ")
        yield AgentTextDelta(text="Here it is.")

    async def update_tools(self, tools: Sequence[Any]) -> None: ...

    async def cancel(self) -> None: ...

    @property
    def history(self) -> list[dict[str, Any]]:
        return []

    def record_interrupted_reply(self, heard_text: str) -> None: ...

    def clear_history(self) -> None: ...

    def restore_history(self, items: Sequence[dict[str, Any]]) -> None: ...


class InstantTTS(TTSProvider):
    name = "instant"
    sample_rate = 24000

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        yield bytes(2 * 24000 // 2)  # 0.5 s


async def serve_instant(port: int) -> None:
    """The server side of the overhead benchmark (its own process, so clients do not skew it)."""
    setup_logging("WARNING")
    config = VixioConfig.model_validate(
        {"xiaozhi": {"host": "127.0.0.1", "port": port, "idle_timeout": 0, "http": {"host": "127.0.0.1", "port": 0}}}
    )

    async def factory(context):
        return Pipeline(
            [
                TextAggregatorStation(),
                AgentStation(InstantAgent()),
                SentenceAggregatorStation(),
                TTSStation(InstantTTS()),
            ],
            session_id=context.session_id,
        )

    async with VixioServer(config, factory):
        print("ready", flush=True)
        await asyncio.Event().wait()


async def overhead(sessions: int, port: int = 18770, *, stagger: float = 0.0) -> list[float]:
    import json
    import subprocess

    import websockets

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve-instant", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    latencies: list[float] = []
    try:

        async def client(index: int) -> None:
            async with websockets.connect(
                f"ws://127.0.0.1:{port}/",
                compression=None,
                additional_headers={"Device-Id": f"02:00:00:00:00:{index:02x}"},
            ) as ws:
                await ws.send(json.dumps({"type": "hello", "version": 1, "transport": "websocket"}))
                await ws.recv()
                for _ in range(5):
                    await asyncio.sleep(random.uniform(0, stagger))
                    sent = time.monotonic()
                    await ws.send(json.dumps({"type": "listen", "state": "detect", "text": "hello"}))
                    first = None
                    while True:
                        message = await ws.recv()
                        if isinstance(message, bytes) and first is None:
                            first = time.monotonic()
                            latencies.append((first - sent) * 1000)
                        elif isinstance(message, str) and json.loads(message).get("state") == "stop":
                            break

        await asyncio.gather(*(client(i) for i in range(sessions)))
    finally:
        server.terminate()
        server.wait(10)
    return latencies


async def offline() -> None:
    from vixio.providers.tts.piper import PiperTTS
    from vixio.transports.xiaozhi.protocol.codec import resample

    tts = PiperTTS()
    pcm = b"".join([c async for c in tts.synthesize("What is the capital of France?")])
    question = bytes(16000) + resample(pcm, tts.sample_rate, 16000) + bytes(2 * 16000)
    config = load_config(ROOT / "config.yaml")
    config.xiaozhi.host = config.xiaozhi.http.host = "127.0.0.1"
    config.xiaozhi.port = config.xiaozhi.http.port = 0
    rows = []
    from vixio.testing.device import SimulatedDevice

    async with VixioServer(config) as server:
        async with SimulatedDevice(ws_url=f"ws://127.0.0.1:{server.transport.port}/") as device:
            await device.connect()
            for _ in range(3):
                await device.start_listening("auto")
                mark = device.mark()
                await device.stream_audio(question)
                await device.wait_for("tts", state="stop", after=mark, timeout=120)
                await device.wait_until_idle(timeout=60)
                (connection,) = server.transport.connections.values()
                marks = connection.session.state.turns[-1].marks
                end = marks["speech_end"]
                rows.append({k: round((v - end) * 1000) for k, v in sorted(marks.items(), key=lambda kv: kv[1])})
    for row in rows:
        print("offline turn (ms after end of speech):", row)
    firsts = [row["first_frame_sent"] for row in rows]
    print(f"offline: end of speech → first downlink frame median {statistics.median(firsts):.0f} ms")


async def main(args: argparse.Namespace) -> None:
    setup_logging("WARNING")
    for sessions, stagger, how in (
        (1, 0.0, ""),
        (100, 3.0, ", turns at random times"),
        (100, 0.0, ", all 100 turns ending at the same instant"),
    ):
        values = sorted(await overhead(sessions, stagger=stagger))
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        print(
            f"overhead, {sessions} session(s){how}: end of turn → first frame p50 {statistics.median(values):.1f} ms, "
            f"p95 {p95:.1f} ms ({len(values)} turns)"
        )
    if args.offline:
        await offline()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--serve-instant", type=int)
    arguments = parser.parse_args()
    if arguments.serve_instant:
        asyncio.run(serve_instant(arguments.serve_instant))
    else:
        asyncio.run(main(arguments))
