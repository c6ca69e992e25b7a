"""`tools.require_speaker`: only a recognised enrolled voice runs the tool; anyone else hears a refusal
(spoken by the executor itself, not left to the model) and the model is told not to try again."""

from __future__ import annotations

import pytest

from vixio.config.tools import ToolsConfig
from vixio.core.tools import ToolExecutor, ToolPolicy, ToolSet
from vixio.core.tools.executor import SPEAKER_REFUSAL

from .test_executor import FakeDevice, call, device_tools

pytestmark = pytest.mark.unit


async def test_an_unknown_voice_is_refused_aloud_and_an_enrolled_one_runs_the_tool() -> None:
    device = FakeDevice()
    toolset = ToolSet(ToolsConfig(require_speaker=["self.reboot"]).policy())
    toolset.set_tools("device", device_tools(device))
    executor = ToolExecutor(toolset)
    said: list[str] = []

    async def say(text: str) -> None:
        said.append(text)

    executor.speaker = say
    person = ""
    executor.person = lambda: person
    refused = await executor.execute(call("self_reboot"))
    assert not refused.success and "only an enrolled voice" in refused.text and device.calls == []
    assert said == [SPEAKER_REFUSAL["en"]]
    # Tools not listed run for anyone.
    assert (await executor.execute(call("self_get_device_status"))).success
    person = "Alice"
    assert (await executor.execute(call("self_reboot"))).text == "self.reboot done"
    assert device.calls == [("self.get_device_status", {}), ("self.reboot", {})]


def test_patterns_and_public_names_select_the_tools() -> None:
    policy = ToolPolicy(require_speaker=("self.*",))
    device = FakeDevice()
    tools = device_tools(device)
    assert all(policy.needs_speaker(tool) for tool in tools)
    assert not any(ToolPolicy().needs_speaker(tool) for tool in tools)
