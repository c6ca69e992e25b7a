"""Checks the capacity benchmark's own load generator: can it keep real time for N devices?

    .venv/bin/python bench/capacity/selfcheck.py --n 200 [--generators G]

Instead of vixio, a minimal answering machine (its own process, no VAD, no codec) answers each
device's turn a fixed `ANSWER_DELAY_S` after the packet that ends the question arrives: `tts
start`, 25 ready-made 60 ms frames (5 at once, then one per 60 ms, like vixio's pacing), `tts
stop`. The benchmark's report then shows what the generator alone costs (its CPU, its send
lateness) and how exactly it measures: latency should read the answer delay plus loopback
time, with no late frames.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from capacity.load import build_clips  # noqa: E402
from capacity.procs import Children, ProcessTree  # noqa: E402

ANSWER_DELAY_S = 0.6
REPLY_FRAMES = 25
PREBUFFER = 5


async def _answer(ws: Any, last_speech: int) -> None:
    frame = bytes(120)
    received = 0
    turn_task: asyncio.Task[None] | None = None

    async def reply() -> None:
        await asyncio.sleep(ANSWER_DELAY_S)
        await ws.send(json.dumps({"type": "tts", "state": "start"}))
        start = time.monotonic()
        for k in range(REPLY_FRAMES):
            due = start + max(0, k - PREBUFFER + 1) * 0.060
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            await ws.send(frame)
        await ws.send(json.dumps({"type": "tts", "state": "stop"}))

    async for message in ws:
        if isinstance(message, bytes):
            received += 1
            if received == last_speech + 1:
                turn_task = asyncio.create_task(reply())
            continue
        data = json.loads(message)
        if data.get("type") == "hello":
            await ws.send(
                json.dumps(
                    {
                        "type": "hello",
                        "transport": "websocket",
                        "session_id": "selfcheck",
                        "audio_params": {"format": "opus", "sample_rate": 24000, "channels": 1, "frame_duration": 60},
                    }
                )
            )
        elif data.get("type") == "listen" and data.get("state") == "start":
            received = 0
    if turn_task is not None:
        turn_task.cancel()


async def serve_answering_machine(port: int) -> None:
    last_speech = build_clips()[0].last_speech
    async with websockets.serve(
        lambda ws: _answer(ws, last_speech),
        "127.0.0.1",
        port,
        compression=None,
        ping_interval=None,
        max_queue=None,
        backlog=1024,
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()


class AnsweringMachine:
    """The answering machine in its own process, shaped like VixioServerProcess for `run_load`."""

    def __init__(self, children: Children) -> None:
        from capacity.server import free_port

        port = free_port()
        self.ws_url = f"ws://127.0.0.1:{port}/"
        self.proc = children.start([sys.executable, __file__, "--serve", str(port)], stdout=-1, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the answering machine did not start")
        self.tree = ProcessTree(self.proc.pid)


def main() -> int:
    parser = argparse.ArgumentParser(description="Can the capacity load generator keep real time for N devices?")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--generators", type=int, default=0)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve_answering_machine(args.serve))
        return 0
    from bench_capacity import run_load
    from capacity.report import print_summary

    children = Children()
    try:
        machine = AnsweringMachine(children)
        with tempfile.TemporaryDirectory(prefix="vixio-selfcheck-") as tmp:
            no_fakes = ProcessTree(-1)  # a tree with no process: CPU 0
            summary = run_load(children, machine, no_fakes, args.n, args.turns, 2.0, args.generators, Path(tmp))
        print(f"answering machine: answers {ANSWER_DELAY_S * 1000:.0f} ms after the last speech packet arrives")
        print_summary(summary)
    finally:
        children.kill_all()
    return 1 if summary["turns"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
