"""Honest answers for a model without tools: requests it cannot serve, and the clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vixio.config.languages import language_pack
from vixio.config.pipeline import resolve_timezone
from vixio.providers.agent.base import AgentTextDelta
from vixio.providers.agent.instructions import TurnInstructions
from vixio.providers.agent.no_tools_guard import RULES, NoToolsGuard
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 25, 13, 5, tzinfo=UTC)  # a Wednesday


def guard(language: str = "en", zone: str = "Europe/Berlin") -> NoToolsGuard:
    pack = language_pack(language)
    clock = TurnInstructions(
        "", clock_note=pack.clock_note, weekdays=pack.weekdays, timezone=resolve_timezone(zone), clock=lambda: NOW
    )
    return NoToolsGuard(RULES[language], clock)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Set the volume to 30.", RULES["en"].cannot_act),
        ("could you make the screen a bit darker", RULES["en"].cannot_act),
        ("Restart the device.", RULES["en"].cannot_act),
        ("What's the weather like in Paris?", RULES["en"].cannot_look_up),
        ("How cold is it outside?", RULES["en"].cannot_look_up),
        ("What time is it in Tokyo?", RULES["en"].cannot_look_up),  # not the clock here
        ("What time is it?", "It's 2:05 PM."),
        ("what's the time in the afternoon here", "It's 2:05 PM."),
        ("What day of the week is it?", "Today is Wednesday, 25 November 2026."),
        ("What year is it?", "Today is Wednesday, 25 November 2026."),
        ("Tell me a joke.", None),
        ("What is 12 times 7?", None),
        ("How are you today?", None),
    ],
)
def test_english_requests(text: str, answer: str | None) -> None:
    assert guard()(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("把音量调到三十", RULES["zh"].cannot_act),
        ("北京明天会下雨吗", RULES["zh"].cannot_look_up),
        ("东京现在几点", RULES["zh"].cannot_look_up),
        ("现在几点了？", "现在是21:05。"),
        ("北京时间几点", "现在是21:05。"),
        ("今天星期几", "今天是2026年11月25日，星期三。"),
        ("给我讲个笑话", None),
    ],
)
def test_mandarin_requests(text: str, answer: str | None) -> None:
    assert guard("zh", "Asia/Shanghai")(text) == answer


async def test_a_guarded_turn_skips_the_model_and_stays_in_history(
    server: ScriptedLLMServer, make_provider: object
) -> None:
    server.expect(Reply.text("Because it was tired."))
    agent = make_provider()  # type: ignore[operator]
    agent.answer_first = guard()
    await agent.initialize(system_prompt="Be brief.")
    first = [e async for e in agent.chat("Set the volume to 30.")]
    assert "".join(e.text for e in first if isinstance(e, AgentTextDelta)) == RULES["en"].cannot_act
    assert server.requests == []  # the model was not asked
    _ = [e async for e in agent.chat("Why did the chicken cross the road?")]
    messages = server.messages(0)
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user"]
    assert messages[2]["content"] == RULES["en"].cannot_act  # the model sees what was said
    agent.record_interrupted_reply("Because")
    assert agent.history[-1]["content"].startswith("Because")
