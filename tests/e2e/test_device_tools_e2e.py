"""Device tools end to end: simulated firmware ⇄ vixio server ⇄ openai-agents/litellm ⇄ scripted LLM.

The model sees sanitized names, calls one with a string argument, the device receives the
dotted name with an integer argument and an integer id, the result reaches the model, and the
answer is spoken. Also: tools arrive mid-session, policy switches, control vs query, timeouts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.tools import DeviceTool, hang_forever
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.process


async def start(llm: ScriptedLLMServer, tools: dict[str, Any] | None = None) -> VixioServer:
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "t",
                "timeout": 10,
            },
            "tools": tools or {},
        }
    )
    server = VixioServer(config)
    await server.start()
    return server


def url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


async def tools_ready(server: VixioServer, name: str, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for tools in server.tools.values():
            names = [t.name for t in tools.tools]
            if name in names:
                return names
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} never offered; have {[[t.name for t in s.tools] for s in server.tools.values()]}")


def calls(device: SimulatedDevice, method: str = "tools/call") -> list[dict[str, Any]]:
    return [r for r in device.mcp_requests if r.get("method") == method]


async def ask(device: SimulatedDevice, text: str) -> str:
    """Type a question; the spoken (subtitled) answer."""
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=15)
    return " ".join(
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    )


async def test_model_sets_the_volume_through_the_device(llm: ScriptedLLMServer) -> None:
    llm.expect(
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": "30"}, call_id="call_vol"),
        Reply.text("Done, the volume is 30 now."),
    )
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual") as device:
            await device.connect()
            names = await tools_ready(server, "self_audio_speaker_set_volume")
            assert "self_get_device_status" in names and "get_time" in names
            assert not any("." in n for n in names)
            assert "self_reboot" not in names  # user-only firmware tools are not for the model

            assert await ask(device, "Set the volume to 30.") == "Done, the volume is 30 now."

            (call,) = calls(device)
            assert call["params"] == {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}}
            assert isinstance(call["id"], int)
            assert device.status.volume == 30
            offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
            assert "self_audio_speaker_set_volume" in offered
            assert [m for m in llm.messages(1) if m["role"] == "tool"] == [
                {"role": "tool", "tool_call_id": "call_vol", "content": "true"}
            ]
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_tool_timeout_and_device_error_reach_the_model(llm: ScriptedLLMServer) -> None:
    slow = DeviceTool("self.slow.thing", "Never answers.", {"type": "object", "properties": {}}, hang_forever)

    def jammed(args: dict[str, Any]) -> bool:
        raise RuntimeError("motor jammed")

    broken = DeviceTool("self.motor.spin", "Spin the motor.", {"type": "object", "properties": {}}, jammed)
    llm.expect(
        Reply.tool_call("self_slow_thing", {}, call_id="c1"),
        Reply.text("The device did not answer."),
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": 500}, call_id="c2"),
        Reply.text("That volume is too high."),
        Reply.tool_call("self_motor_spin", {}, call_id="c3"),
        Reply.text("The motor is jammed."),
    )
    server = await start(llm, {"timeouts": {"self.slow.thing": 0.2}})
    try:
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual", tools=[slow, broken]) as device:
            await device.connect()
            await tools_ready(server, "self_slow_thing")
            await ask(device, "do the slow thing")
            out = [m for m in llm.messages(1) if m["role"] == "tool"][-1]["content"]
            assert out == "Error: self_slow_thing did not answer within 0.2 s"
            cancelled = calls(device, "notifications/cancelled")
            assert cancelled and cancelled[0]["params"]["requestId"] == calls(device)[0]["id"]

            await ask(device, "volume 500")  # validated locally: never sent to the device
            out = [m for m in llm.messages(3) if m["role"] == "tool"][-1]["content"]
            assert "500 is greater than the maximum of 100" in out
            assert len(calls(device)) == 1

            await ask(device, "spin")  # the firmware's error reply has no code
            out = [m for m in llm.messages(5) if m["role"] == "tool"][-1]["content"]
            assert out == "Error: device error: motor jammed"
            assert calls(device)[-1]["params"]["name"] == "self.motor.spin"
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_policy_switches_and_control_tools(llm: ScriptedLLMServer) -> None:
    gate = asyncio.Event()

    async def slow_light(args: dict[str, Any]) -> bool:
        await gate.wait()
        return True

    light = DeviceTool(
        "self.light.set_rgb",
        "Set the light colour.",
        {"type": "object", "properties": {"r": {"type": "integer"}}, "required": ["r"]},
        slow_light,
    )
    llm.expect(
        Reply.tool_call("self_light_set_rgb", {"r": 255}, call_id="c1"),
        Reply.text("Light is red."),
    )
    server = await start(
        llm, {"toggles": {"self.screen.*": False}, "builtin": [], "sub_types": {"self.light.set_rgb": "control"}}
    )
    try:
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual", tools=[light]) as device:
            await device.connect()
            names = await tools_ready(server, "self_light_set_rgb")
            assert not any(n.startswith("self_screen") for n in names) and "get_time" not in names
            started = time.perf_counter()
            assert await ask(device, "red light") == "Light is red."
            assert time.perf_counter() - started < 5
            assert [m for m in llm.messages(1) if m["role"] == "tool"][-1]["content"] == "success"
            assert calls(device)[-1]["params"]["name"] == "self.light.set_rgb"  # sent, not awaited
            gate.set()
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_tools_that_change_mid_session_are_used_from_the_next_call(llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.text("Hi."), Reply.tool_call("self_fan_on", {}, call_id="c1"), Reply.text("Fan on."))
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual") as device:
            await device.connect()
            await tools_ready(server, "self_get_device_status")
            await ask(device, "hello")
            assert "self_fan_on" not in [t["function"]["name"] for t in llm.requests[0]["tools"]]
            device.mcp_tools.append(
                DeviceTool("self.fan.on", "Fan on.", {"type": "object", "properties": {}}, lambda args: True)
            )
            await device.notify_mcp_tools_changed()
            await tools_ready(server, "self_fan_on")
            assert await ask(device, "fan on") == "Fan on."
            assert "self_fan_on" in [t["function"]["name"] for t in llm.requests[1]["tools"]]
            assert len(llm.messages(1)) == 4  # the conversation survived the swap (user, reply, user...)
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_a_session_s_tools_go_with_it(llm: ScriptedLLMServer) -> None:
    server = await start(llm)
    try:
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual") as device:
            await device.connect()
            await tools_ready(server, "self_get_device_status")
            assert len(server.tools) == 1
        deadline = time.monotonic() + 5
        while server.tools and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert server.tools == {}
    finally:
        await server.stop()


async def test_mcp_servers_from_config_join_device_tools(llm: ScriptedLLMServer) -> None:
    """Process- and session-scoped MCP servers (the test weather server, written with the `mcp`
    package) next to the device's tools; a server that cannot start is left out."""
    import sys
    from pathlib import Path

    server_script = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_servers" / "weather_server.py")
    llm.expect(
        Reply.tool_call("get_weather", {"city": "Paris"}, call_id="c1"),
        Reply.text("Paris is sunny."),
    )
    server = await start(
        llm,
        {
            "mcp_servers": {
                "weather": {"command": sys.executable, "args": [server_script], "tools": ["get_weather"]},
                "notes": {
                    "command": sys.executable,
                    "args": [server_script],
                    "scope": "session",
                    "tools": ["server_pid"],
                },
                "broken": {"command": "/nonexistent/mcp-server", "startup_timeout": 5},
            }
        },
    )
    try:
        assert server.voice.mcp is not None and "broken" in server.voice.mcp.failures
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual") as device:
            await device.connect()
            await tools_ready(server, "self_get_device_status")
            names = await tools_ready(server, "server_pid", timeout=30)
            assert "get_weather" in names and "forecast" not in names
            assert await ask(device, "Weather in Paris?") == "Paris is sunny."
            output = [m for m in llm.messages(1) if m["role"] == "tool"][-1]["content"]
            assert "Paris" in output and not output.startswith("Error")
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_the_vision_url_answers_clearly(llm: ScriptedLLMServer) -> None:
    import aiohttp

    server = await start(llm)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{server.ota.port}/mcp/vision/explain", data={"question": "what is this?"}
            ) as reply,
        ):
            assert reply.status == 501
            assert "no vision model" in (await reply.json())["message"]
    finally:
        await server.stop()
