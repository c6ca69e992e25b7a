"""EndpointRules: what a pause's transcript says about the turn, in English and Mandarin."""

from __future__ import annotations

import pytest

from vixio.stations.asr.endpointing import EndpointRules, hanging_ending

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text",
    [
        "What is the weather in.",
        "Set the volume to",
        "Call my mom and.",
        "Remind me about the",
        "把音量调到。",
        "我想听周杰伦的",
        "帮我查一下北京和",
        "明天在",
        "从上海到。",
        "帮我放一首。",
    ],
)
def test_hanging_endings_are_unfinished(text: str) -> None:
    verdict = EndpointRules().judge(text)
    assert verdict is not None and verdict[0] == "unfinished"


@pytest.mark.parametrize(
    "text",
    [
        "What time is it?",
        "Turn the light on.",
        "Tell me more!",
        "Where are you from?",
        "今天天气怎么样？",
        "好的。",
        "是的。",
        "帮我查一下。",
        "这是我的。",
        "收到。",
        "来一个。",
        "我要这个。",
    ],
)
def test_sentence_final_punctuation_completes(text: str) -> None:
    assert EndpointRules().judge(text) == ("complete", f"ends in {text[-1]!r}")


@pytest.mark.parametrize("text", ["what time is it", "Well...", "嗯…", "", "  "])
def test_no_telling_without_punctuation(text: str) -> None:
    assert EndpointRules().judge(text) is None


def test_each_signal_can_be_switched_off() -> None:
    assert EndpointRules(punctuation=False).judge("What time is it?") is None
    assert EndpointRules(hanging_words=False).judge("Set the volume to.") == ("complete", "ends in '.'")
    assert hanging_ending("Set the volume to.") == "to" and hanging_ending("Turn it on.") is None
