"""Tool-call path benchmark (not a test): run `python bench/bench_tools.py`.

A real server and the simulated device on loopback, in one process. The agent's FunctionTool
for `self_audio_speaker_set_volume` (what openai-agents invokes when the model's tool call has
arrived) is called with `{"volume": "30"}`; measured:

1. invoke → the `tools/call` frame at the device: name resolution, policy, coercion, jsonschema
   validation, JSON-RPC framing, the session's write queue and the WebSocket. Target ≤ 1 ms.
2. the whole call, until the result text is back in the tool (device reply included).
3. the executor alone (no I/O): a local tool through resolve/validate/run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.tool_context import ToolContext  # noqa: E402

from vixio.app.log import setup_logging  # noqa: E402
from vixio.app.server import VixioServer  # noqa: E402
from vixio.config.models import VixioConfig  # noqa: E402
from vixio.core.tools import ToolCallRequest, ToolExecutor, ToolSet, func_to_tool_definition  # noqa: E402
from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter  # noqa: E402
from vixio.testing.device import SimulatedDevice  # noqa: E402

RUNS = 500


def stats(values_ms: list[float]) -> str:
    values = sorted(values_ms)
    p95 = values[int(len(values) * 0.95) - 1]
    return f"median {statistics.median(values):.3f} ms, p95 {p95:.3f} ms, max {values[-1]:.3f} ms"


async def device_path() -> None:
    config = VixioConfig.model_validate(
        {
            "log": {"level": "WARNING"},
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "agent": {"provider": "litellm", "model": "openai/unused", "api_base": "http://127.0.0.1:9/v1"},
        }
    )
    server = VixioServer(config)
    await server.start()
    try:
        async with SimulatedDevice(
            ws_url=f"ws://127.0.0.1:{server.transport.port}/", listening_mode="manual"
        ) as device:
            await device.connect()
            while not any("self_audio_speaker_set_volume" in [t.name for t in s.tools] for s in server.tools.values()):
                await asyncio.sleep(0.005)
            tools = next(iter(server.tools.values()))
            tool = next(t for t in tools.tools if t.name == "self_audio_speaker_set_volume")
            function_tool = OpenAIAgentToolConverter(tools.executor).convert_device_tool(tool)

            mcp = device._mcp  # the device's MCP server: stamp the frame's arrival
            arrived: list[float] = []
            handle = mcp.handle

            async def stamped(payload: Any) -> None:
                if isinstance(payload, dict) and payload.get("method") == "tools/call":
                    arrived.append(time.perf_counter())
                await handle(payload)

            mcp.handle = stamped
            to_frame, whole = [], []
            for i in range(RUNS):
                context = ToolContext(
                    context=None, tool_name=tool.name, tool_call_id=f"call_{i}", tool_arguments='{"volume": "30"}'
                )
                started = time.perf_counter()
                output = await function_tool.on_invoke_tool(context, '{"volume": "30"}')
                whole.append((time.perf_counter() - started) * 1000)
                to_frame.append((arrived[-1] - started) * 1000)
                assert output == "true", output
            print(f"tool invoke -> tools/call frame at the device ({RUNS} calls): {stats(to_frame)}  [target <= 1 ms]")
            print(f"whole device tool call incl. the device's reply:        {stats(whole)}")
    finally:
        await server.stop()


async def executor_only() -> None:
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    toolset = ToolSet()
    toolset.set_tools("local", [func_to_tool_definition(add)])
    executor = ToolExecutor(toolset)
    times = []
    for i in range(RUNS * 4):
        started = time.perf_counter()
        await executor.execute(ToolCallRequest(f"c{i}", "add", raw='{"a": "1", "b": 2}'))
        times.append((time.perf_counter() - started) * 1000)
    print(f"executor alone, local tool (resolve, coerce, validate, run, record): {stats(times)}")


async def main() -> None:
    setup_logging("WARNING")
    await device_path()
    await executor_only()


if __name__ == "__main__":
    asyncio.run(main())
