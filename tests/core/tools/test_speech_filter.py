"""SpeechFilter: whatever the chunking, exactly the text outside markup is spoken, thinking is
released as thought, and no marker ever reaches TTS."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vixio.core.tools.speech_filter import DEFAULT_RULES, FilterOutput, MarkupRule, SpeechFilter, literal

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Fixture:
    name: str
    text: str
    speech: str
    """What must be spoken: the text outside markup, written out by hand."""
    thought: str = ""
    markup: bool = False
    """Whether the reply had a block other than thinking (`markup_seen`)."""


FIXTURES = [
    Fixture(
        "xml call",
        'Sure, turning it down.\n<function_calls>\n<invoke name="set_volume">\n<parameter name="level">30'
        "</parameter>\n</invoke>\n</function_calls>\nDone.",
        "Sure, turning it down.\n\nDone.",
        markup=True,
    ),
    Fixture(
        "xml values with < & and fences",
        '<function_calls><invoke name="run"><parameter name="code">if a < b & c:\n    print("```", "</think>")\n'
        "</parameter></invoke></function_calls>ok",
        "ok",
        markup=True,
    ),
    Fixture(
        "namespaced tool_call",
        '好的<minimax:tool_call>\n<invoke name="a"></invoke>\n</minimax:tool_call>马上。',
        "好的马上。",
        markup=True,
    ),
    Fixture("upper case tags", "A<FUNCTION_CALLS><invoke name='a'></invoke></Function_Calls>B", "AB", markup=True),
    Fixture(
        "echoed results",
        "<function_results><result><tool_name>a</tool_name><stdout>42</stdout></result></function_results>"
        "The answer is 42.",
        "The answer is 42.",
        markup=True,
    ),
    Fixture("think", "<think>The user wants 42.</think>It is 42.", "It is 42.", thought="The user wants 42."),
    Fixture(
        "thinking with a call inside",
        "<thinking>maybe <function_calls><invoke name='a'></invoke></function_calls>?</thinking>No call needed.",
        "No call needed.",
        thought="maybe <function_calls><invoke name='a'></invoke></function_calls>?",
    ),
    Fixture("upper case think", "<THINK>x</THINK>y", "y", thought="x"),
    Fixture(
        "vcp request",
        "我来算一下。\n<<<[TOOL_REQUEST]>>>\ntool_name:「始」SciCalculator「末」,\nexpression:「始」sqrt(2)「末」\n"
        "<<<[END_TOOL_REQUEST]>>>\n稍等。",
        "我来算一下。\n\n稍等。",
        markup=True,
    ),
    Fixture(
        "vcp fuzzy markers",
        "Ok <<[tool_request]>>\ntool_name:{始}x{末}\n<<<<[END_TOOL_REQUEST]>>>> done, <<[TOOL_REQUEST]>>>"
        "tool_name:「始」y「末」<<<[end_tool_request]>> bye",
        "Ok  done,  bye",
        markup=True,
    ),
    Fixture(
        "vcp escape block",
        "x<<<[TOOL_REQUEST_ESCAPE]>>>tool_name:「始」a「末」<<<[END_TOOL_REQUEST_ESCAPE]>>>y",
        "xy",
        markup=True,
    ),
    Fixture(
        "vcp result",
        "<<<[TOOL_RESULT]>>>\ntool_name: x\nstatus: ok\n<<<[END_TOOL_RESULT]>>>Result read.",
        "Result read.",
        markup=True,
    ),
    Fixture(
        "vcp summary",
        "[[VCP调用结果信息汇总:\n- 工具名称: X\n- 执行状态: ✅ SUCCESS\n- 返回内容: 42\nVCP调用结果结束]]好了。",
        "好了。",
        markup=True,
    ),
    Fixture("aio summary", "前[[AIO工具调用结果信息汇总：\n### 结果 1\nAIO工具调用结果结束]]后", "前后", markup=True),
    Fixture(
        "code fence",
        "Here is code:\n```python\nprint('<think>')\n```\nThat's it.",
        "Here is code:\n\nThat's it.",
        markup=True,
    ),
    Fixture("four-backtick fence", "a ````\nx ``` y\n```` b", "a  b", markup=True),
    Fixture(
        "fenced vcp request",
        "Calling:\n```Tool\n<<<[TOOL_REQUEST]>>>\ntool_name:「始」x「末」\n<<<[END_TOOL_REQUEST]>>>\n```\nwait",
        "Calling:\n\nwait",
        markup=True,
    ),
    Fixture(
        "plain text with look-alikes",
        "If a < b and b << c, see [[note]] or [x], `code`, ``two``, <b>bold</b>, <function>x</function>, "
        "<think about it, <<<[TOOL and ns:function_calls.",
        "If a < b and b << c, see [[note]] or [x], `code`, ``two``, <b>bold</b>, <function>x</function>, "
        "<think about it, <<<[TOOL and ns:function_calls.",
    ),
    Fixture("ends with <", "Is 3 <", "Is 3 <"),
    Fixture("ends with a marker prefix", "Almost <minimax:function_ca", "Almost <minimax:function_ca"),
    Fixture("ends with a vcp prefix", "Then <<<[TOOL_REQ", "Then <<<[TOOL_REQ"),
    Fixture(
        "CJK",
        "今天天气很好，适合出去走走。<think>用户问天气</think>明天可能下雨。",
        "今天天气很好，适合出去走走。明天可能下雨。",
        thought="用户问天气",
    ),
    Fixture(
        "unclosed call protects to the end",
        'Let me check. <function_calls><invoke name="a"><parameter name="x">1</parameter>\nmore words',
        "Let me check. ",
        markup=True,
    ),
    Fixture("unclosed think", "<think>still thinking about </thi", "", thought="still thinking about </thi"),
    Fixture("unclosed fence", "Look: ```\nprint(1)\n", "Look: ", markup=True),
    Fixture(
        "everything",
        "<think>plan</think>First, <function_calls><invoke name='a'></invoke></function_calls>then "
        "<<<[TOOL_REQUEST]>>>tool_name:「始」b「末」<<<[END_TOOL_REQUEST]>>>and ```x```, finally "
        "<function_results>r</function_results>done <thinking>more</thinking>.",
        "First, then and , finally done .",
        thought="planmore",
        markup=True,
    ),
    Fixture("empty", "", ""),
]

MARKERS = re.compile(
    r"</?(?:[A-Za-z_][\w.-]*:)?(?:function_calls|tool_call|function_results)>|</?think(?:ing)?>"
    r"|<{2,4}\[(?:END_)?TOOL_(?:REQUEST(?:_ESCAPE)?|RESULT|DEFINITION)\]>{2,4}|```"
    r"|\[\[(?:VCP|AIO)\w*汇总|(?:VCP|AIO)\w*结束\]\]",
    re.IGNORECASE,
)
"""Every marker sequence, written independently of the filter's rules."""


def run(text: str, cuts: list[int]) -> tuple[list[FilterOutput], SpeechFilter]:
    speech_filter = SpeechFilter()
    bounds = [0, *sorted(set(cuts)), len(text)]
    outputs = [speech_filter.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    outputs.append(speech_filter.flush())
    return outputs, speech_filter


def check(fixture: Fixture, cuts: list[int]) -> None:
    outputs, speech_filter = run(fixture.text, cuts)
    speech = "".join(o.speech for o in outputs)
    assert speech == fixture.speech, cuts
    assert "".join(o.thought for o in outputs) == fixture.thought, cuts
    assert speech_filter.markup_seen is fixture.markup
    assert not MARKERS.search(speech), cuts


def test_fixtures_expect_what_the_reply_has_outside_markup() -> None:
    """The fixtures themselves: plain ones keep their text, the others lose every marker."""
    for fixture in FIXTURES:
        if not MARKERS.search(fixture.text):
            assert fixture.speech == fixture.text, fixture.name
        assert not MARKERS.search(fixture.speech), fixture.name


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_whole_reply_in_one_delta(fixture: Fixture) -> None:
    check(fixture, [])


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_one_character_at_a_time(fixture: Fixture) -> None:
    check(fixture, list(range(1, len(fixture.text))))


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_every_single_split_point(fixture: Fixture) -> None:
    for cut in range(1, len(fixture.text)):
        check(fixture, [cut])


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_any_chunking(data: st.DataObject) -> None:
    fixture = data.draw(st.sampled_from(FIXTURES), label="fixture")
    cuts = data.draw(st.lists(st.integers(0, len(fixture.text)), max_size=40), label="cuts")
    check(fixture, cuts)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_chunking_of_fixtures_back_to_back(data: st.DataObject) -> None:
    """Fixtures joined (the ones that close their markup): the state carries across blocks."""
    closed = [f for f in FIXTURES if not f.name.startswith(("unclosed", "ends with"))]
    parts = data.draw(st.lists(st.sampled_from(closed), min_size=2, max_size=4), label="fixtures")
    text = "".join(f.text for f in parts)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=60), label="cuts")
    joined = Fixture(
        "joined",
        text,
        "".join(f.speech for f in parts),
        "".join(f.thought for f in parts),
        any(f.markup for f in parts),
    )
    check(joined, cuts)


def test_a_lone_less_than_is_held_then_spoken() -> None:
    speech_filter = SpeechFilter()
    assert speech_filter.feed("Is 3 <").speech == "Is 3 "
    assert speech_filter.flush().speech == "<"
    speech_filter = SpeechFilter()
    assert speech_filter.feed("a <").speech == "a "
    assert speech_filter.feed(" b").speech == "< b"


def test_prose_without_marker_characters_is_released_at_once() -> None:
    speech_filter = SpeechFilter()
    for delta in ["Hel", "lo, ", "world", "! 你好", "。"]:
        assert speech_filter.feed(delta) == FilterOutput(speech=delta)


def test_markup_is_swallowed_as_soon_as_it_starts() -> None:
    speech_filter = SpeechFilter()
    assert speech_filter.feed("Ok <func").speech == "Ok "
    assert speech_filter.feed("tion_calls><invoke name='a'>").speech == ""
    assert speech_filter.markup_seen
    assert speech_filter.feed("</invoke></function_calls> bye").speech == " bye"


def test_thought_streams_while_its_end_marker_is_held() -> None:
    speech_filter = SpeechFilter()
    assert speech_filter.feed("<think>abc</th") == FilterOutput(thought="abc")
    assert speech_filter.feed("ink>Hi") == FilterOutput(speech="Hi")


def test_reset_forgets_the_reply() -> None:
    speech_filter = SpeechFilter()
    speech_filter.feed("a <function_calls><invoke")
    assert speech_filter.markup_seen
    speech_filter.reset()
    assert not speech_filter.markup_seen
    assert speech_filter.feed("fresh").speech == "fresh"


def test_flush_keeps_markup_seen_for_the_caller() -> None:
    speech_filter = SpeechFilter()
    speech_filter.feed("<function_calls></function_calls>")
    speech_filter.flush()
    assert speech_filter.markup_seen


def test_custom_rules() -> None:
    rules = [*DEFAULT_RULES, MarkupRule("emotion", starts=(literal("[emotion:"),), ends=(literal("]"),))]
    speech_filter = SpeechFilter(rules)
    outputs = [speech_filter.feed(c) for c in ("Hi [emo", "tion:happy] there")]
    assert "".join(o.speech for o in outputs) + speech_filter.flush().speech == "Hi  there"
    assert SpeechFilter().feed("[emotion:happy]").speech == "[emotion:happy]"
