"""`bench_capacity.py --isolation`: does one session's heavy tool work delay another session?

A probe session sends typed turns (`listen detect` with text) and times each round trip to its
first `stt` message. It is timed three ways, `rounds` times each:

- quiet: no other session is busy (the reference);
- register: a neighbour session has just sent `mcp/registerTools` with 600 tools (the probe is
  sent right behind it, so the server has both frames at once). Each tool has an object schema
  with two typed, described properties, as real tools do; the same 600 names with empty
  schemas cost the server about a quarter of that time (schema checks dominate);
- list: a firmware-like neighbour with 1,000 device tools has just answered the server's last
  `tools/list` page (the probe is sent right behind that page).

Meanwhile a third session sends a repeated `hello` every 20 ms and times its answer: its worst
round trip during each phase shows any stall of the event loop, whenever it happens.
The delay reported for a phase is its worst probe round trip minus the quiet median.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import numpy as np
import websockets

from capacity.load import Device, build_clips

REGISTER_TOOLS = 600
LIST_TOOLS = 1000
PING_INTERVAL_S = 0.020


def registration_entries(count: int) -> list[dict[str, Any]]:
    """`count` registerTools entries shaped like the registerTools design's examples."""
    return [
        {
            "name": f"bench_tool_{i:04d}",
            "description": f"Bench tool {i}: set a level (0-100) with a label.",
            "main_type": "remote",
            "sub_type": "query" if i % 2 else "control",
            "parameters": {
                "type": "object",
                "properties": {
                    "level": {"type": "integer", "minimum": 0, "maximum": 100, "description": "the level"},
                    "label": {"type": "string", "description": "a short label"},
                },
                "required": ["level"],
            },
        }
        for i in range(count)
    ]


class HelloPinger:
    """A session answering `hello` again and again: each round trip measures how busy the loop is."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, float]] = []
        """(sent at, round trip) in seconds, time.monotonic()."""
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HelloPinger:
        self._ws = await websockets.connect(
            self.url,
            additional_headers={"Device-Id": "02:00:00:00:00:fd", "Client-Id": "bench-pinger", "Protocol-Version": "1"},
            ping_interval=None,
            compression=None,
        )
        await self._round_trip()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._ws.close()

    async def _round_trip(self) -> float:
        await self._ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "version": 1,
                    "transport": "websocket",
                    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
                }
            )
        )
        sent = time.monotonic()
        while True:
            message = await self._ws.recv()
            if isinstance(message, str) and json.loads(message).get("type") == "hello":
                return time.monotonic() - sent

    async def _run(self) -> None:
        while True:
            sent = time.monotonic()
            self.samples.append((sent, await self._round_trip()))
            await asyncio.sleep(PING_INTERVAL_S)

    def worst(self, start: float, end: float) -> float:
        inside = [rtt for sent, rtt in self.samples if start <= sent <= end]
        return max(inside) if inside else 0.0


async def _probe(probe: Any) -> float:
    """One typed turn: seconds from sending the text to the first `stt`; waits for the reply's end."""
    probe.messages.clear()
    sent = time.monotonic()
    await probe.send_text("What is the weather today?")
    await probe.wait_for_message("stt", timeout=30.0)
    rtt = time.monotonic() - sent
    await probe.wait_for_message("tts", state="stop", timeout=30.0)
    return rtt


async def _isolation(url: str, rounds: int) -> dict[str, Any]:
    from vixio.testing.register_client import RegisterClient

    phases: dict[str, dict[str, Any]] = {}
    async with HelloPinger(url) as pinger, RegisterClient(url, device_id="02:00:00:00:00:fc") as probe:
        start = time.monotonic()
        quiet = [await _probe(probe) for _ in range(rounds)]
        phases["quiet"] = {"probe_ms": quiet, "hello_worst_ms": pinger.worst(start, time.monotonic())}

        start = time.monotonic()
        rtts, took = [], []
        entries = registration_entries(REGISTER_TOOLS)
        async with RegisterClient(url, device_id="02:00:00:00:00:fb") as neighbour:
            for _ in range(rounds):
                began = time.monotonic()
                registering = asyncio.create_task(neighbour.register(tools=entries, timeout=60.0))
                await asyncio.sleep(0)  # the registration frame leaves first
                rtts.append(await _probe(probe))
                reply = await registering
                if "result" not in reply:
                    raise RuntimeError(f"registerTools of {REGISTER_TOOLS} tools refused: {reply}")
                took.append(time.monotonic() - began)
        phases["register"] = {
            "probe_ms": rtts,
            "hello_worst_ms": pinger.worst(start, time.monotonic()),
            "tools": REGISTER_TOOLS,
        }

        start = time.monotonic()
        rtts = []
        clip = build_clips()[0]
        for i in range(rounds):
            device = Device(900_000 + i, url, clip, turns=0, tools=LIST_TOOLS)
            last_page = asyncio.Event()
            send = device.mcp._send

            async def send_and_flag(payload: dict[str, Any], send: Any = send, flag: asyncio.Event = last_page) -> None:
                await send(payload)
                result = payload.get("result")
                if isinstance(result, dict) and "tools" in result and "nextCursor" not in result:
                    flag.set()

            device.mcp._send = send_and_flag
            await device.connect()
            await asyncio.wait_for(last_page.wait(), 60.0)
            rtts.append(await _probe(probe))
            await device.close()
        phases["list"] = {
            "probe_ms": rtts,
            "hello_worst_ms": pinger.worst(start, time.monotonic()),
            "tools": LIST_TOOLS,
        }
    return phases


def run_isolation(url: str, rounds: int = 10) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    phases = asyncio.run(_isolation(url, rounds))
    for phase in phases.values():
        phase["probe_ms"] = [round(1000 * x, 1) for x in phase["probe_ms"]]
        phase["hello_worst_ms"] = round(1000 * phase["hello_worst_ms"], 1)
    quiet_median = float(np.median(phases["quiet"]["probe_ms"]))
    print(
        f"isolation ({rounds} typed turns per phase; round trip = `listen detect` text -> first `stt`; "
        f"machine: {os.cpu_count()} cores, load average {load_before:.1f} before)"
    )
    for name, phase in phases.items():
        probes = phase["probe_ms"]
        phase["median_ms"] = float(np.median(probes))
        phase["max_ms"] = max(probes)
        phase["delay_ms"] = round(max(probes) - quiet_median, 1)
        what = {
            "quiet": "no heavy neighbour",
            "register": f"neighbour registers {phase.get('tools')} tools",
            "list": f"neighbour device lists {phase.get('tools')} tools",
        }[name]
        delay = "" if name == "quiet" else f", delay {phase['delay_ms']:.0f} ms vs quiet median"
        print(
            f"  {name:<9s} {what:<36s} median {phase['median_ms']:.0f} ms, max {phase['max_ms']:.0f} ms{delay}; "
            f"worst hello round trip {phase['hello_worst_ms']:.0f} ms"
        )
    return {
        "mode": "isolation",
        "rounds": rounds,
        "phases": phases,
        "failed": 0,
        "machine": {"cores": os.cpu_count(), "load_average_before": round(load_before, 2)},
    }
