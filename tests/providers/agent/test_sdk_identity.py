"""openai-agents' agent identity map on the direct path: the SDK's own map, without signing agents
that have nothing to be told apart from."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from vixio.patches import openai_agents as sdk_identity
from vixio.providers.agent.openai_agents.provider import with_tools

identity_module = pytest.importorskip("agents._run_state_agent_identity")
tracker_module = pytest.importorskip("agents.run_internal.tool_use_tracker")
state_module = pytest.importorskip("agents.run_state")
from agents import Agent, ModelSettings, function_tool  # noqa: E402

pytestmark = pytest.mark.unit


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@function_tool
def set_volume(level: int) -> str:
    """Set the speaker volume, 0-100."""
    return f"volume {level}"


def voice_agent(**changes: Any) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions="You are a voice assistant. " * 40,
        model="openai/bench",
        tools=[get_weather, set_volume],
        **changes,
    )


def test_installed_everywhere_the_sdk_reads_the_map() -> None:
    assert sdk_identity.install()
    assert sdk_identity.install()  # once only: the original stays reachable
    fast = identity_module._build_agent_identity_map
    assert fast.vixio_fast_path and not getattr(fast.original, "vixio_fast_path", False)
    assert tracker_module._build_agent_identity_map is fast
    assert state_module._build_agent_identity_map is fast


def test_a_graph_of_distinct_names_maps_as_the_sdk_does() -> None:
    sdk_identity.install()
    fast = identity_module._build_agent_identity_map
    billing = Agent(name="billing", instructions="Bills.")
    support = Agent(name="support", instructions="Support.", handoffs=[billing])
    root = voice_agent(handoffs=[support, billing])
    mapped = fast(root)
    assert mapped == fast.original(root)
    assert list(mapped) == list(fast.original(root)) == ["assistant", "support", "billing"]
    # And through the SDK's own callers (which read the module's function).
    keys = identity_module._build_agent_identity_keys_by_id(root)
    assert keys == {id(root): "assistant", id(support): "support", id(billing): "billing"}


def test_repeated_names_go_to_the_sdks_ordering(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk_identity.install()
    fast = identity_module._build_agent_identity_map
    calls: list[Any] = []
    original = fast.original
    monkeypatch.setattr(
        identity_module,
        "_build_agent_identity_map",
        sdk_identity._identity_map(
            lambda agent: calls.append(agent) or original(agent), identity_module._iter_agent_graph
        ),
    )
    twin_a = Agent(name="twin", instructions="First.")
    twin_b = Agent(name="twin", instructions="Second.")
    root = voice_agent(handoffs=[twin_a, twin_b])
    mapped = identity_module._build_agent_identity_map(root)
    assert calls == [root]
    assert mapped == original(root)
    assert set(mapped) == {"assistant", "twin", "twin#2"}


def test_the_direct_map_is_much_cheaper() -> None:
    sdk_identity.install()
    fast = identity_module._build_agent_identity_map
    root = voice_agent()

    def cpu(function: Any) -> float:
        started = time.process_time()
        for _ in range(200):
            function(root)
        return time.process_time() - started

    assert cpu(fast) * 5 < cpu(fast.original)  # ~80x here (1 against 86 µs): no JSON signature of the agent


def test_a_turns_agent_is_the_clone_it_replaces() -> None:
    agent = voice_agent(model_settings=ModelSettings(temperature=0.3))
    tools = [get_weather]
    copied, cloned = with_tools(agent, tools), agent.clone(tools=list(tools))
    assert copied is not agent and copied.tools is tools
    assert {f.name: getattr(copied, f.name) for f in dataclasses.fields(copied)} == {
        f.name: getattr(cloned, f.name) for f in dataclasses.fields(cloned)
    }
    assert agent.tools == [get_weather, set_volume]  # the provider's agent keeps its own list
