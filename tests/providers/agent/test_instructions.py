"""Each model call's instructions carry the date, time and weekday, rendered at that call."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from vixio.config.languages import language_pack
from vixio.config.pipeline import resolve_timezone
from vixio.providers.agent.instructions import TurnInstructions
from vixio.providers.agent.text_tools import TextToolAgentProvider
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration

# Wednesday 25 November 2026, 13:05 UTC = 14:05 in Berlin = 21:05 in Shanghai.
NOON_UTC = datetime(2026, 11, 25, 13, 5, tzinfo=UTC)


class Clock:
    """A settable clock for `TurnInstructions.clock`."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def instructions(
    language: str = "en",
    zone: str | None = "Europe/Berlin",
    clock: Callable[[], datetime] | None = None,
    limits: str = "",
) -> TurnInstructions:
    pack = language_pack(language)
    return TurnInstructions(
        "You are a voice assistant.",
        clock_note=pack.clock_note,
        weekdays=pack.weekdays,
        timezone=resolve_timezone(zone),
        limits=limits,
        clock=clock or Clock(NOON_UTC),
    )


def test_english_names_the_weekday_date_time_and_zone() -> None:
    text = instructions()()
    assert text.startswith("You are a voice assistant.\n\n")
    assert "It is now 2:05 PM on Wednesday, 25 November 2026 (Europe/Berlin time)." in text


def test_mandarin_uses_chinese_weekdays_and_a_24_hour_clock() -> None:
    text = instructions("zh", "Asia/Shanghai")()
    assert "现在是2026年11月25日 星期三 21:05（Asia/Shanghai时间）。" in text


def test_the_zone_moves_the_date_and_weekday() -> None:
    late = Clock(datetime(2026, 11, 25, 23, 30, tzinfo=UTC))  # already Thursday in Tokyo
    assert "Thursday, 26 November 2026" in instructions(zone="Asia/Tokyo", clock=late)()
    assert "Wednesday, 25 November 2026" in instructions(zone="America/New_York", clock=late)()


def test_without_a_zone_the_servers_local_zone_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    local = datetime.now().astimezone()
    text = instructions(zone=None, clock=lambda: local)()
    hour = local.hour % 12 or 12
    assert f"{hour}:{local.minute:02d}" in text and local.strftime("%A") in text


def test_each_call_reads_the_clock_again() -> None:
    clock = Clock(NOON_UTC)
    render = instructions(clock=clock)
    first = render()
    clock.now += timedelta(days=1, minutes=10)
    second = render()
    assert "2:05 PM on Wednesday" in first and "2:15 PM on Thursday, 26 November" in second


def test_limits_are_appended_for_a_model_without_tools() -> None:
    note = language_pack("en").no_tools_note
    text = instructions(limits=note)()
    assert text.endswith(note) and "cannot change anything on the device" in note


def test_an_unknown_zone_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="Mars/Olympus"):
        resolve_timezone("Mars/Olympus")
    assert resolve_timezone(None) is None
    assert resolve_timezone("Asia/Shanghai") == ZoneInfo("Asia/Shanghai")


def test_agent_timezone_is_checked_in_the_config() -> None:
    from vixio.config.models import VixioConfig

    with pytest.raises(ValueError, match=r"(?s)timezone.*Europe/Berln"):
        VixioConfig.model_validate({"agent": {"provider": "local-llama", "timezone": "Europe/Berln"}})
    config = VixioConfig.model_validate({"agent": {"provider": "local-llama", "timezone": "Asia/Shanghai"}})
    assert config.agent is not None and config.agent.timezone == "Asia/Shanghai"


def system_text(server: ScriptedLLMServer, request: int) -> str:
    messages: list[dict[str, Any]] = server.messages(request)
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


async def test_every_turn_of_a_session_gets_the_time_of_that_turn(
    server: ScriptedLLMServer, make_provider: Callable[..., Any]
) -> None:
    server.expect(Reply.text("It is two."), Reply.text("It is a quarter past two."))
    clock = Clock(NOON_UTC)
    agent = make_provider()
    await agent.initialize(system_prompt=instructions(clock=clock))
    _ = [event async for event in agent.chat("What time is it?")]
    clock.now += timedelta(minutes=10)
    _ = [event async for event in agent.chat("And now?")]
    assert "It is now 2:05 PM on Wednesday" in system_text(server, 0)
    assert "It is now 2:15 PM on Wednesday" in system_text(server, 1)
    server.assert_all_consumed()


async def test_a_text_tool_protocol_keeps_the_clock_fresh(
    server: ScriptedLLMServer, make_provider: Callable[..., Any]
) -> None:
    from vixio.core.tools.executor import ToolExecutor
    from vixio.core.tools.local import func_to_tool_definition, get_time
    from vixio.core.tools.policy import ToolPolicy
    from vixio.core.tools.protocols.vcp import VcpProtocol
    from vixio.core.tools.toolset import ToolSet

    server.expect(Reply.text("Hello."), Reply.text("Hello again."))
    clock = Clock(NOON_UTC)
    toolset = ToolSet(ToolPolicy(), session_id="s")
    agent = TextToolAgentProvider(make_provider(), VcpProtocol(), ToolExecutor(toolset, session_id="s"))
    await agent.initialize(tools=[func_to_tool_definition(get_time)], system_prompt=instructions(clock=clock))
    _ = [event async for event in agent.chat("Hi")]
    clock.now += timedelta(hours=2)
    _ = [event async for event in agent.chat("Hi again")]
    assert "2:05 PM" in system_text(server, 0) and "get_time" in system_text(server, 0)
    assert "4:05 PM" in system_text(server, 1) and "get_time" in system_text(server, 1)


async def test_the_clock_tools_tell_the_time_in_agent_timezone() -> None:
    from vixio.voice.stack import VoiceStack

    stack = VoiceStack(config_with_agent({"provider": "local-llama", "timezone": "Asia/Kathmandu"}))
    tools = {tool.name: tool for tool in stack.local_tools}
    assert (await tools["get_time"].invoke({})).text.endswith("(UTC+0545)")  # the instructions' zone too
    expected = datetime.now(ZoneInfo("Asia/Kathmandu")).strftime("%Y-%m-%d")
    assert (await tools["get_date"].invoke({})).text.startswith(expected[:8])


def config_with_agent(agent: dict[str, Any]) -> Any:
    from vixio.config.models import VixioConfig

    return VixioConfig.model_validate({"agent": agent})
