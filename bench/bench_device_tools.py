"""Device tool benchmarks (not a test): run `python bench/bench_device_tools.py`.

A real server and the simulated device (its faithful MCP server) on loopback, in one process.

1. listing: a device with 40 tools (about 600 bytes each, so several 8000-byte pages) connects;
   time from `initialize` reaching the device to the server's tools callback, and from the
   server hello to the callback. Target: median and p95 of the first <= 50 ms.
2. call: one `tools/call` round trip (`self.get_device_status`) through the server's client.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vixio.app.log import setup_logging  # noqa: E402
from vixio.app.server import VixioServer  # noqa: E402
from vixio.config.models import VixioConfig  # noqa: E402
from vixio.core.pipeline import Pipeline  # noqa: E402
from vixio.testing.device import DeviceTool, SimulatedDevice  # noqa: E402
from vixio.transports.xiaozhi.websocket.transport import DeviceContext  # noqa: E402

TARGET_MS = 50.0


def board_tools(count: int) -> list[DeviceTool]:
    schema = {
        "type": "object",
        "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["level"],
    }
    return [
        DeviceTool(
            f"self.board.tool_{i:02d}",
            f"Tool number {i}. " + "Does a board-specific thing. " * 20,
            schema,
            lambda args: args["level"],
        )
        for i in range(count)
    ]


def stats(values_ms: list[float]) -> str:
    ordered = sorted(values_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered):6.2f} ms   p95 {p95:6.2f} ms   max {ordered[-1]:6.2f} ms"


async def main(runs: int, calls: int, tool_count: int) -> int:
    setup_logging("WARNING")
    ready: asyncio.Queue[tuple[float, int]] = asyncio.Queue()

    async def factory(context: DeviceContext) -> Pipeline:
        async def tools_ready(definitions: list) -> None:
            ready.put_nowait((time.monotonic(), len(definitions)))

        context.transport.set_device_tools_callback(context.session_id, tools_ready)
        return Pipeline([], session_id=context.session_id)

    config = VixioConfig.model_validate(
        {"xiaozhi": {"host": "127.0.0.1", "port": 0, "idle_timeout": 0, "http": {"host": "127.0.0.1", "port": 0}}}
    )
    tools = board_tools(tool_count)
    init_to_ready: list[float] = []
    hello_to_ready: list[float] = []
    pages = 0
    async with VixioServer(config, factory) as server:
        url = f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"
        for run in range(runs + 1):  # run 0 warms up imports and caches
            async with SimulatedDevice(ws_url=url, tools=tools) as device:
                await device.connect()
                hello_at = next(m.time for m in device.received if m.data.get("type") == "hello")
                done_at, listed = await asyncio.wait_for(ready.get(), 10)
                init_at = next(m.time for m in device.received if m.data.get("type") == "mcp")
                if run == 0:
                    pages = sum(1 for r in device.mcp_requests if r.get("method") == "tools/list")
                    assert listed == tool_count + 4, listed  # + the 4 model-visible built-ins
                    continue
                init_to_ready.append((done_at - init_at) * 1000)
                hello_to_ready.append((done_at - hello_at) * 1000)

        async with SimulatedDevice(ws_url=url, tools=tools) as device:
            await device.connect()
            await asyncio.wait_for(ready.get(), 10)
            client = server.transport.device_tools[device.session_id]
            round_trips: list[float] = []
            for _ in range(calls):
                started = time.perf_counter()
                result = await client.call_tool("self.get_device_status", {})
                round_trips.append((time.perf_counter() - started) * 1000)
                assert result.success, result.error

    print(f"listing {tool_count + 6} device tools ({tool_count + 4} for the model) in {pages} pages, {runs} runs")
    print(f"  initialize -> tools ready : {stats(init_to_ready)}   (target <= {TARGET_MS:.0f} ms)")
    print(f"  server hello -> tools ready: {stats(hello_to_ready)}")
    print(f"call_tool round trip, {calls} calls:")
    print(f"  self.get_device_status     : {stats(round_trips)}")
    p95 = sorted(init_to_ready)[min(len(init_to_ready) - 1, round(0.95 * (len(init_to_ready) - 1)))]
    return 0 if p95 <= TARGET_MS else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--tools", type=int, default=40)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.runs, args.calls, args.tools)))
