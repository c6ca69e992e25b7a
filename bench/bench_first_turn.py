"""The first answer of a conversation, with cloud APIs a network away: warmed connections or not.

    .venv/bin/python bench/bench_first_turn.py [--rtt-ms 60] [--setup-rtts 2] [--conversations 8] [--idle 16]

A Xiaozhi device connects when its wake word is heard and its user speaks at once; by then the
server's pools of connections to the cloud APIs have gone cold (idle connections close after 5 s
for the agent's model, 15 s for ASR and TTS). This runs two `vixio serve --workers 1` side by side,
`pipeline.prewarm` on and off (providers/prewarm.py), against bench/capacity/fakes.py (ASR, LLM and
TTS answering at once) reached through a delaying proxy on loopback that stands for the network:
every byte waits `--rtt-ms`/2 each way, and a new connection's first bytes wait `--setup-rtts`
round trips more, as TCP's handshake and TLS 1.3's would (TLS 1.2: 3). The kernel's `netem` is
not used: many hosts (this one) lack it.

Each conversation: one firmware-like device per server (bench/capacity/load.py: 0.3 s of noise,
a 1.8 s spoken question, 1.5 s of noise, as 60 ms Opus) connects, asks two questions back to back,
hangs up; then `--idle` seconds pass (the pools go cold) before the next. Printed: last speech
frame sent → first answer audio at the device, p50 / p95 per turn and mode, the server's marks
of the first turn (ms after the speech end), the warm-up requests the fakes saw, the CPU model
and the in-run floor (Opus decode + Silero per 60 ms frame, bench/capacity/floor.py).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from capacity.floor import cpu_model, measure_floor
from capacity.load import Device, build_clips
from capacity.procs import Children
from capacity.server import VixioServerProcess, start_fakes

ROOT = Path(__file__).resolve().parents[1]
MODES = {"prewarm": True, "cold": False}
FIRST_TURN = re.compile(r"\| turn 1 \{.*?\} latency \(ms from first mark\): (\{.*\})")


class DelayingProxy:
    """TCP on loopback to `target`, each direction delayed by half a round trip; the first bytes of
    a new connection wait `setup_rtts` round trips more (the handshakes the network would cost)."""

    def __init__(self, target: tuple[str, int], rtt: float, setup_rtts: float) -> None:
        self.target, self.rtt, self.setup_rtts = target, rtt, setup_rtts
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            setup = self.setup_rtts * self.rtt
            await asyncio.gather(
                self._pump(reader, up_writer, setup), self._pump(up_reader, writer, 0.0), return_exceptions=True
            )
        except (OSError, asyncio.CancelledError):  # the fakes went away, or the benchmark ends
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, setup: float) -> None:
        """Copy `reader` to `writer`, each piece written half a round trip (plus `setup`, for the
        first) after it was read, in order."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not data:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        delivering = asyncio.create_task(deliver())
        extra = setup
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.rtt / 2 + extra, data))
                extra = 0.0
                if not data:
                    break
            await delivering
        except (OSError, asyncio.CancelledError):
            delivering.cancel()
            writer.close()


def fakes_stats(base_url: str) -> dict[str, int]:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=5) as response:
        return json.loads(response.read())


def percentiles(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{statistics.median(ordered):.0f} / {ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]:.0f}"


async def conversations(
    urls: dict[str, str], count: int, idle: float, proxy: DelayingProxy, results: dict[str, list[list[float]]]
) -> None:
    clips = build_clips()
    for number in range(count):
        devices = {
            mode: Device(1000 * number + index, url, clips[number % len(clips)], 2)
            for index, (mode, url) in enumerate(urls.items())
        }
        start = time.monotonic() + 0.2
        await asyncio.gather(*(device.run(start) for device in devices.values()))
        for mode, device in devices.items():
            for turn, record in enumerate(device.records):
                if record.failed or not record.frames:
                    print(
                        f"  {mode} conversation {number + 1} turn {turn + 1} failed: {record.failed}", file=sys.stderr
                    )
                    continue
                results[mode][turn].append(1000 * (record.frames[0] - record.last_speech_sent))
        firsts = ", ".join(f"{mode} {results[mode][0][-1]:.0f}" for mode in urls if results[mode][0])
        print(
            f"  conversation {number + 1}/{count}: first answer ms {firsts}; proxy connections so far "
            f"{proxy.connections}",
            flush=True,
        )
        if number + 1 < count:
            await asyncio.sleep(idle)


def first_turn_marks(server: VixioServerProcess) -> dict[str, str]:
    """p50 / p95 of each mark (ms after the speech end) of each session's first turn in the log."""
    firsts = []
    for line in server._log_lines():
        found = FIRST_TURN.search(line)
        if found:
            turn = ast.literal_eval(found.group(1))
            if "speech_end" in turn:
                firsts.append(turn)
    keys = ("asr_final", "llm_first_token", "tts_first_audio", "first_frame_sent")
    out = {}
    for key in keys:
        values = [turn[key] - turn["speech_end"] for turn in firsts if key in turn]
        out[key] = percentiles(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtt-ms", type=float, default=60.0, help="round trip to the cloud APIs")
    parser.add_argument(
        "--setup-rtts",
        type=float,
        default=2.0,
        help="round trips a new connection costs before its request (TCP + TLS 1.3: 2)",
    )
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--idle", type=float, default=16.0, help="seconds between conversations (pools go cold)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    clips = build_clips()
    children = Children()
    with tempfile.TemporaryDirectory(prefix="vixio-first-turn-") as tmp:
        fakes_url, _ = start_fakes(children, env)
        fakes_port = int(fakes_url.rsplit(":", 1)[1].split("/")[0])

        async def run() -> dict[str, Any]:
            proxy = DelayingProxy(("127.0.0.1", fakes_port), args.rtt_ms / 1000, args.setup_rtts)
            await proxy.start()
            proxied = f"http://127.0.0.1:{proxy.port}/v1"
            servers = {}
            try:
                for mode, on in MODES.items():
                    server = VixioServerProcess(
                        children,
                        Path(tmp),
                        proxied,
                        env,
                        workers=1,
                        memory=False,
                        overrides={"pipeline": {"prewarm": on}},
                    )
                    servers[mode] = await asyncio.to_thread(server.__enter__)
                floor = measure_floor(clips)
                print(
                    f"CPU: {cpu_model()}, {os.cpu_count()} cores; floor {floor['ms_per_frame']:.3f} ms per frame "
                    f"(Opus decode + Silero, one thread); round trip {args.rtt_ms:g} ms, a new connection "
                    f"{args.setup_rtts:g} more; {args.conversations} conversations, {args.idle:g} s apart",
                    flush=True,
                )
                await asyncio.sleep(args.idle)  # the ready checks' connections go cold too
                results: dict[str, list[list[float]]] = {mode: [[], []] for mode in MODES}
                await conversations(
                    {mode: s.ws_url for mode, s in servers.items()}, args.conversations, args.idle, proxy, results
                )
                marks = {mode: first_turn_marks(s) for mode, s in servers.items()}
                problems = {mode: s.log_problems() for mode, s in servers.items()}
            finally:
                for server in servers.values():
                    server.__exit__()
                await proxy.stop()
            return {
                "results": results,
                "marks": marks,
                "problems": problems,
                "floor": floor,
                "stats": fakes_stats(fakes_url),
                "cpu": cpu_model(),
            }

        try:
            summary = asyncio.run(run())
        finally:
            children.kill_all()
    print(
        "\n| mode | turn 1 (first answer) p50 / p95 ms | turn 2 p50 / p95 ms | turns | server marks after speech end, "
        "p50 / p95 ms (asr_final, llm_first_token, tts_first_audio, first_frame_sent) | log warnings / errors |"
    )
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        first, second = summary["results"][mode]
        marks = summary["marks"][mode]
        problems = summary["problems"][mode]
        print(
            f"| {mode} | {percentiles(first)} | {percentiles(second)} | {len(first)} + {len(second)} | "
            f"{marks['asr_final']}, {marks['llm_first_token']}, {marks['tts_first_audio']}, "
            f"{marks['first_frame_sent']} | {problems['warnings']} / {problems['errors']} |"
        )
    saved = (
        [statistics.median(summary["results"]["cold"][0]) - statistics.median(summary["results"]["prewarm"][0])]
        if summary["results"]["cold"][0] and summary["results"]["prewarm"][0]
        else []
    )
    if saved:
        print(
            f"\nfirst answer sooner with prewarm: {saved[0]:.0f} ms at the median "
            f"(round trip {args.rtt_ms:g} ms, {args.setup_rtts:g} more per new connection); "
            f"warm-up requests the APIs saw: {summary['stats'].get('warmups', 0)}"
        )
    if args.json:
        args.json.write_text(json.dumps({**summary, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))


if __name__ == "__main__":
    main()
