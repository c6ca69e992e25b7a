"""ToolExecutor: policy, arguments, confirmation, control vs query, timeouts, parallelism."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from vixio.core.tools import (
    ToolCallRequest,
    ToolCallResult,
    ToolDefinition,
    ToolExecutor,
    ToolPolicy,
    ToolSet,
    func_to_tool_definition,
)
from vixio.core.tools.context import is_affirmative

pytestmark = pytest.mark.unit

VOLUME_SCHEMA = {
    "type": "object",
    "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["volume"],
}


class FakeDevice:
    """Records calls; answers after `release` is set (or at once)."""

    def __init__(self, gated: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.release = asyncio.Event()
        if not gated:
            self.release.set()
        self.running = 0
        self.max_running = 0

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        self.calls.append((name, arguments))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return ToolCallResult.ok(f"{name} done")


def device_tools(device: FakeDevice) -> list[ToolDefinition]:
    return [
        ToolDefinition(
            "self.audio_speaker.set_volume", "Set the volume.", VOLUME_SCHEMA, source="device", client=device
        ),
        ToolDefinition("self.get_device_status", "Status.", source="device", client=device),
        ToolDefinition("self.reboot", "Reboot.", source="device", client=device),
    ]


def make(policy: ToolPolicy | None = None, device: FakeDevice | None = None) -> tuple[ToolExecutor, FakeDevice]:
    device = device or FakeDevice()
    toolset = ToolSet(policy or ToolPolicy())
    toolset.set_tools("device", device_tools(device))
    return ToolExecutor(toolset), device


def call(name: str, raw: str = "{}", call_id: str = "c1") -> ToolCallRequest:
    return ToolCallRequest(call_id=call_id, tool_name=name, raw=raw)


async def test_public_name_with_string_argument_reaches_the_device_coerced() -> None:
    executor, device = make()
    result = await executor.execute(call("self_audio_speaker_set_volume", '{"volume": "30"}'))
    assert result.success and result.text == "self.audio_speaker.set_volume done"
    assert device.calls == [("self.audio_speaker.set_volume", {"volume": 30})]
    record = executor.context.get("c1")
    assert record is not None and record.request.original_name == "self.audio_speaker.set_volume"
    assert record.request.source == "device" and record.result is result


async def test_invalid_arguments_never_reach_the_device() -> None:
    executor, device = make()
    result = await executor.execute(call("self_audio_speaker_set_volume", '{"volume": 150}'))
    assert not result.success and "greater than the maximum of 100" in result.text
    result = await executor.execute(call("self_audio_speaker_set_volume", '{"volume": '))
    assert not result.success and "not valid JSON" in result.text
    assert device.calls == []


async def test_unknown_and_turned_off_tools_are_refused_with_what_exists() -> None:
    executor, device = make(ToolPolicy(toggles={"self.reboot": False}))
    assert [t.name for t in executor.toolset.tools] == ["self_audio_speaker_set_volume", "self_get_device_status"]
    result = await executor.execute(call("self_reboot"))
    assert not result.success and "self_reboot" in result.text
    result = await executor.execute(call("self.reboot"))
    assert result.text == "Error: the tool self.reboot is turned off on this server"
    result = await executor.execute(call("fly"))
    assert "available tools: self_audio_speaker_set_volume, self_get_device_status" in result.text
    assert device.calls == []


async def test_default_disabled_with_pattern_toggles_and_master_switch() -> None:
    executor, _ = make(ToolPolicy(default_enabled=False, toggles={"self.audio_*": True}))
    assert [t.name for t in executor.toolset.tools] == ["self_audio_speaker_set_volume"]
    executor, _ = make(ToolPolicy(enabled=False))
    assert executor.toolset.tools == []


async def test_parse_errors_from_a_text_protocol_go_back_to_the_model() -> None:
    executor, device = make()
    request = ToolCallRequest("v1", "self.get_device_status", protocol="vcp", errors=["field x was not closed"])
    result = await executor.execute(request)
    assert not result.success and "field x was not closed" in result.text and device.calls == []


async def test_control_tools_are_answered_at_once_and_still_run() -> None:
    device = FakeDevice(gated=True)
    executor, _ = make(ToolPolicy(sub_types={"self.audio_speaker.set_volume": "control"}), device)
    started = time.perf_counter()
    result = await executor.execute(call("self_audio_speaker_set_volume", '{"volume": 10}'))
    assert result.text == "success" and time.perf_counter() - started < 0.05
    await asyncio.sleep(0)
    assert device.calls == [("self.audio_speaker.set_volume", {"volume": 10})]
    device.release.set()
    await executor.close()
    assert device.running == 0


async def test_query_tools_wait_and_time_out_with_a_clear_message() -> None:
    device = FakeDevice(gated=True)
    executor, _ = make(ToolPolicy(timeout=0.05), device)
    result = await executor.execute(call("self_get_device_status"))
    assert result.text == "Error: self_get_device_status did not answer within 0.05 s"
    assert device.running == 0  # the wait was cancelled, not left behind


async def test_per_tool_timeout_overrides_the_default() -> None:
    device = FakeDevice(gated=True)
    executor, _ = make(ToolPolicy(timeout=30, timeouts={"self.get_device_status": 0.02}), device)
    assert "within 0.02 s" in (await executor.execute(call("self_get_device_status"))).text


@pytest.mark.parametrize("parallel", [True, False])
async def test_parallel_switch(parallel: bool) -> None:
    device = FakeDevice(gated=True)
    executor, _ = make(ToolPolicy(parallel=parallel), device)
    calls = [asyncio.create_task(executor.execute(call("self_get_device_status", call_id=f"c{i}"))) for i in range(3)]
    await asyncio.sleep(0.02)
    assert device.running == (3 if parallel else 1)
    device.release.set()
    results = await asyncio.gather(*calls)
    assert all(r.success for r in results)
    assert device.max_running == (3 if parallel else 1)


async def test_confirmation_runs_only_after_the_user_says_yes() -> None:
    executor, device = make(ToolPolicy(require_confirmation=("self.reboot",)))
    first = await executor.execute(call("self_reboot"))
    assert first.status == "pending" and "confirmation" in first.text and device.calls == []
    executor.on_user_text("No, don't.")
    again = await executor.execute(call("self_reboot"))
    assert again.status == "pending" and device.calls == []
    executor.on_user_text("Yes, please.")
    done = await executor.execute(call("self_reboot"))
    assert done.text == "self.reboot done" and device.calls == [("self.reboot", {})]
    # The approval is used up: the next call asks again.
    assert (await executor.execute(call("self_reboot"))).status == "pending"
    # Tools not listed need no confirmation.
    assert (await executor.execute(call("self_get_device_status"))).text == "self.get_device_status done"


async def test_an_approval_covers_only_the_arguments_asked_about() -> None:
    executor, device = make(ToolPolicy(require_confirmation=True))
    await executor.execute(call("self_audio_speaker_set_volume", '{"volume": 10}'))
    executor.on_user_text("好的")
    result = await executor.execute(call("self_audio_speaker_set_volume", '{"volume": 90}'))
    assert result.status == "pending" and device.calls == []


def test_affirmative_answers() -> None:
    for text in ("yes", "Yes please!", "ok", "sure, go ahead", "好的", "可以。", "确定"):
        assert is_affirmative(text), text
    for text in ("no", "not now", "yes, no wait, don't", "不要", "取消", "what?", ""):
        assert not is_affirmative(text), text


async def test_local_functions_sync_and_async_and_their_failures() -> None:
    def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    async def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    toolset = ToolSet()
    toolset.set_tools("local", [func_to_tool_definition(add), func_to_tool_definition(broken)])
    executor = ToolExecutor(toolset)
    assert toolset.tools[0].parameters["required"] == ["a"] and toolset.tools[0].description == "Add two numbers."
    assert (await executor.execute(call("add", '{"a": "40"}'))).text == "42"
    assert (await executor.execute(call("broken"))).text == "Error: broken failed: RuntimeError: disk on fire"


async def test_toolset_listeners_hear_each_change() -> None:
    toolset = ToolSet()
    seen: list[list[str]] = []

    async def listener(tools: list[ToolDefinition]) -> None:
        seen.append([t.name for t in tools])

    toolset.add_listener(listener)
    await toolset.update("device", [ToolDefinition("a.b", "", source="device")])
    await toolset.update("register", [ToolDefinition("c", "", source="register")])
    await toolset.update("device", None)
    assert seen == [["a_b"], ["a_b", "c"], ["c"]]


# --- preemptive turns: side effects wait for the confirmation ---------------------------------


def test_what_may_run_before_the_turn_is_confirmed() -> None:
    policy = ToolPolicy(
        read_only=("self.get_device_status",), sub_types={"self.screen.*": "control"}, async_tools=("slow_report",)
    )
    device = FakeDevice()

    def local(name: str, **kw: Any) -> ToolDefinition:
        return ToolDefinition(name, "", source="local", executor=lambda **_: "ok", **kw)

    early = {
        "device tool": ToolDefinition("self.audio_speaker.set_volume", "", source="device", client=device),
        "device tool named read-only": ToolDefinition("self.get_device_status", "", source="device", client=device),
        "device tool with readOnlyHint": ToolDefinition(
            "self.battery", "", source="device", client=device, read_only=True
        ),
        "MCP tool without the hint": ToolDefinition("search", "", source="mcp", client=device),
        "MCP tool with readOnlyHint false": ToolDefinition("write", "", source="mcp", client=device, read_only=False),
        "companion tool": ToolDefinition("lamp_on", "", source="register", client=device),
        "local query tool": local("get_weather"),
        "local control tool": local("self.screen.off"),
        "local async tool": local("slow_report"),
    }
    assert {what: policy.runs_before_confirmation(tool) for what, tool in early.items()} == {
        "device tool": False,
        "device tool named read-only": True,
        "device tool with readOnlyHint": True,
        "MCP tool without the hint": False,
        "MCP tool with readOnlyHint false": False,
        "companion tool": False,
        "local query tool": True,
        "local control tool": False,
        "local async tool": False,
    }
    confirming = ToolPolicy(require_confirmation=("get_weather",))
    assert not confirming.runs_before_confirmation(early["local query tool"])


async def test_a_held_turn_holds_side_effects_and_lets_reads_run() -> None:
    executor, device = make(ToolPolicy(read_only=("self.get_device_status",)))
    executor.hold()
    status = await executor.execute(ToolCallRequest("c1", "self.get_device_status"))
    assert status.success and device.calls == [("self.get_device_status", {})]
    waiting = asyncio.create_task(
        executor.execute(ToolCallRequest("c2", "self.audio_speaker.set_volume", {"volume": 30}))
    )
    await asyncio.sleep(0.05)
    assert not waiting.done() and len(device.calls) == 1
    executor.release(confirmed=True)
    assert (await waiting).success and device.calls[-1] == ("self.audio_speaker.set_volume", {"volume": 30})


async def test_a_cancelled_held_turn_refuses_the_waiting_call() -> None:
    executor, device = make()
    executor.hold()
    waiting = asyncio.create_task(executor.execute(ToolCallRequest("c1", "self.reboot")))
    await asyncio.sleep(0.05)
    executor.release(confirmed=False)
    result = await waiting
    assert not result.success and "still speaking" in result.text and device.calls == []
    # Not held any more: the next call runs at once.
    assert (await executor.execute(ToolCallRequest("c2", "self.reboot"))).success
