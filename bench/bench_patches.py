"""What the library patches (vixio/patches/) save, measured with and without `VIXIO_NO_PATCHES=1`.

Run: .venv/bin/python bench/bench_patches.py [--rounds 3] [--turns 40] [--sessions 20]

Each round runs both variants, in alternating order, each in fresh processes (a patch, once
installed, stays for the process's life; the switch is read from the environment, as a server's
workers inherit it):

1. **Loop CPU per turn**: `OpenAIAgentProvider` against the loopback `ScriptedLLMServer` in one
   process, `--turns` turns with the history growing to 20 items (cleared every 10 turns, as a
   conversation's window would hold it). The event-loop thread's CPU (`time.thread_time`) per
   turn, from the question to the last delta: what no other session can use meanwhile. The
   scripted server runs in the same loop, so its (identical) share is in both variants; the
   difference is the patches' (openai_sdk, httpcore, openai_agents).
2. **Server CPU per frame**: a Xiaozhi transport server in its own process (bench_transport's),
   `--sessions` devices streaming real-time Opus uplink for 8 s (CPU per 60 ms frame, decode and
   routing included), then as many sessions receiving 3 s of speech each (CPU per downlink frame,
   Opus encode and pacing included). The difference is the websockets patch.

Beside every figure: the CPU model and the in-run floor (Opus decode + Silero VAD per 60 ms frame,
bench/capacity/floor.py) measured in this run; medians and p95 over turns, medians over rounds.
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
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for path in (str(ROOT), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

SWITCH = "VIXIO_NO_PATCHES"
VARIANTS = {"patched": "", "unpatched": "1"}
QUESTION = "What is the capital of France? Answer in one sentence."
ANSWER = "Paris is the capital of France, and it is lovely in spring, when the chestnut trees bloom."


# --- 1. loop CPU per turn (child process) --------------------------------------------------------


async def turns_child(turns: int) -> dict[str, Any]:
    from loguru import logger

    from vixio.providers.agent.base import AgentTextDelta
    from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
    from vixio.testing.llm_server import Reply, ScriptedLLMServer

    logger.remove()
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    async with ScriptedLLMServer() as server:
        agent = OpenAIAgentProvider("openai/bench-model", api_base=server.base_url, api_key="bench")
        await agent.initialize(system_prompt="Be brief.")
        for turn in range(turns + 2):  # two warm-up turns
            if turn % 10 == 0:
                agent.clear_history()
            server.expect(Reply.text(ANSWER))
            cpu, wall = time.thread_time(), time.perf_counter()
            async for event in agent.chat(QUESTION):
                assert isinstance(event, AgentTextDelta) or event is not None
            if turn >= 2:
                cpu_ms.append((time.thread_time() - cpu) * 1000)
                wall_ms.append((time.perf_counter() - wall) * 1000)
        server.assert_all_consumed()
    return {"cpu_ms": cpu_ms, "wall_ms": wall_ms}


def run_turns(variant: str, turns: int) -> dict[str, Any]:
    env = {**os.environ, SWITCH: VARIANTS[variant]}
    done = subprocess.run(
        [sys.executable, __file__, "--child-turns", str(turns)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- 2. server CPU per frame --------------------------------------------------------------------


async def run_frames(variant: str, sessions: int, port: int) -> dict[str, float]:
    import numpy as np

    import bench_transport as transport
    from vixio.transports.xiaozhi.protocol.codec import OpusEncoder

    previous = os.environ.get(SWITCH)
    os.environ[SWITCH] = VARIANTS[variant]  # the server process inherits it
    try:
        server = transport.ServerProcess(port)
    finally:
        if previous is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = previous
    try:
        encoder = OpusEncoder(16000)
        t = np.arange(960) / 16000
        frames = [
            encoder.encode((np.sin(2 * np.pi * f * t) * 5000).astype("<i2").tobytes()) for f in range(200, 1200, 50)
        ]
        sockets = [await transport.connect(port, i) for i in range(sessions)]
        for ws in sockets:
            await ws.send(json.dumps({"type": "listen", "state": "start", "mode": "auto"}))
        count = int(8.0 / 0.060)
        before = server.cpu_seconds()
        started = time.monotonic()

        async def stream(ws: Any) -> None:
            for i in range(count):
                await ws.send(frames[i % len(frames)])
                await asyncio.sleep(max(0.0, started + (i + 1) * 0.060 - time.monotonic()))

        await asyncio.gather(*(stream(ws) for ws in sockets))
        await asyncio.sleep(0.5)
        uplink_ms = (server.cpu_seconds() - before) / (count * sessions) * 1000
        for ws in sockets:
            await ws.close()

        sockets = [await transport.connect(port, 5000 + i) for i in range(sessions)]
        received = 0

        async def listen(ws: Any) -> None:
            nonlocal received
            await ws.send(json.dumps({"type": "listen", "state": "detect", "text": "tell me something"}))
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    received += 1
                elif json.loads(message).get("state") == "stop":
                    return

        before = server.cpu_seconds()
        await asyncio.gather(*(listen(ws) for ws in sockets))
        downlink_ms = (server.cpu_seconds() - before) / max(1, received) * 1000
        for ws in sockets:
            await ws.close()
        return {"uplink_ms": uplink_ms, "downlink_ms": downlink_ms}
    finally:
        server.stop()


# --- the report ---------------------------------------------------------------------------------


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--port", type=int, default=18791)
    parser.add_argument("--child-turns", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_turns:
        print(json.dumps(asyncio.run(turns_child(args.child_turns))))
        return

    from capacity.floor import cpu_model, measure_floor
    from capacity.load import build_clips

    clips = build_clips()
    floors = [measure_floor(clips)["ms_per_frame"]]
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; floor (Opus decode + Silero per 60 ms frame): {floors[0]:.3f} ms",
        flush=True,
    )
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    frames: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for round_index in range(args.rounds):
        order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
        for variant in order:
            turns[variant].append(run_turns(variant, args.turns))
            frames[variant].append(asyncio.run(run_frames(variant, args.sessions, args.port)))
            last = turns[variant][-1]
            print(
                f"round {round_index + 1} {variant:<9}: loop CPU per turn median "
                f"{statistics.median(last['cpu_ms']):.2f} ms; uplink {frames[variant][-1]['uplink_ms']:.3f} ms/frame, "
                f"downlink {frames[variant][-1]['downlink_ms']:.3f} ms/frame",
                flush=True,
            )
        floors.append(measure_floor(clips)["ms_per_frame"])
    floor = statistics.median(floors)
    print(
        f"\nfloor over the run: median {floor:.3f} ms per frame ({min(floors):.3f}-{max(floors):.3f}, "
        f"{len(floors)} measurements)"
    )
    rows: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        cpu = [value for run in turns[variant] for value in run["cpu_ms"]]
        wall = [value for run in turns[variant] for value in run["wall_ms"]]
        rows[variant] = {
            "turn_cpu": statistics.median(cpu),
            "turn_cpu_p95": p95(cpu),
            "turn_wall": statistics.median(wall),
            "uplink": statistics.median(run["uplink_ms"] for run in frames[variant]),
            "downlink": statistics.median(run["downlink_ms"] for run in frames[variant]),
        }
    print(
        f"{'':<10} {'loop CPU/turn':>14} {'p95':>8} {'turn wall':>10} {'uplink/frame':>13} {'x floor':>8} "
        f"{'downlink/frame':>15} {'x floor':>8}"
    )
    for variant, row in rows.items():
        print(
            f"{variant:<10} {row['turn_cpu']:>11.2f} ms {row['turn_cpu_p95']:>5.2f} ms {row['turn_wall']:>7.2f} ms "
            f"{row['uplink']:>10.3f} ms {row['uplink'] / floor:>8.2f} {row['downlink']:>12.3f} ms "
            f"{row['downlink'] / floor:>8.2f}"
        )
    on, off = rows["patched"], rows["unpatched"]
    print(
        f"switching the patches off costs: loop CPU per turn x{off['turn_cpu'] / on['turn_cpu']:.2f} "
        f"(+{off['turn_cpu'] - on['turn_cpu']:.2f} ms), uplink x{off['uplink'] / on['uplink']:.2f}, "
        f"downlink x{off['downlink'] / on['downlink']:.2f}"
    )


if __name__ == "__main__":
    main()
