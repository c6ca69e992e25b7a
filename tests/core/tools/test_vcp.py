"""VCP text protocol: parsing every shape docs/tool-protocols.md lists, rendering, result formatting."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vixio.core.tools.protocols.vcp import (
    ESCAPE_FIELD_END,
    ESCAPE_FIELD_START,
    NOT_CLOSED,
    REQUEST_END,
    REQUEST_START,
    RESULT_END,
    RESULT_START,
    SUMMARY_END,
    SUMMARY_START,
    VcpProtocol,
    field_value,
    render_call,
)
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition

pytestmark = pytest.mark.unit

VCP = VcpProtocol()
FUZZY = VcpProtocol(fuzzy=True)


def block(*fields: str, start: str = REQUEST_START, end: str = REQUEST_END) -> str:
    return "\n".join([start, *fields, end])


def calls(text: str, protocol: VcpProtocol = VCP) -> list[tuple[str, dict[str, str], list[str]]]:
    return [(r.tool_name, r.arguments, r.errors) for r in protocol.parse(text)]


# --- well-formed requests -------------------------------------------------------------------


def test_single_call_with_trailing_commas_and_prose():
    text = (
        "Let me work that out.\n"
        + block("tool_name:「始」SciCalculator「末」,", "expression:「始」sqrt(2)「末」")
        + "\nOne moment."
    )
    [request] = VCP.parse(text)
    assert request == ToolCallRequest(
        call_id="vcp_1",
        tool_name="SciCalculator",
        arguments={"expression": "sqrt(2)"},
        protocol="vcp",
        raw=block("tool_name:「始」SciCalculator「末」,", "expression:「始」sqrt(2)「末」"),
    )


def test_whitespace_around_colon_multiline_values_and_trimming():
    text = block("tool_name :\t「始」 write_note 「末」", "body:\n「始」\n  line one\n  line two\n「末」")
    assert calls(text) == [("write_note", {"body": "line one\n  line two"}, [])]


def test_fields_on_one_line_and_text_between_fields_ignored():
    text = block("tool_name:「始」lamp「末」 please set brightness:「始」40「末」 -- thanks, mode:「始」warm「末」")
    assert calls(text) == [("lamp", {"brightness": "40", "mode": "warm"}, [])]


def test_crlf_becomes_lf_everywhere():
    text = block("tool_name:「始」note「末」", "body:「始」a\nb「末」").replace("\n", "\r\n")
    [request] = VCP.parse(text)
    assert request.arguments == {"body": "a\nb"} and "\r" not in request.raw


def test_key_charset_is_word_characters_and_hyphen():
    text = block(
        "tool_name:「始」car「末」", "año_vehiculo:「始」2020「末」", "max-speed:「始」90「末」", "x.y:「始」1「末」"
    )
    # `x.y` is not a key; its `y` part is (the scanner skips what is not a key, as VCPToolBox does).
    assert calls(text) == [("car", {"año_vehiculo": "2020", "max-speed": "90", "y": "1"}, [])]


def test_dotted_tool_names_are_kept_exactly():
    assert calls(block("tool_name:「始」self.audio_speaker.set_volume「末」", "volume:「始」50「末」")) == [
        ("self.audio_speaker.set_volume", {"volume": "50"}, [])
    ]


def test_two_blocks_keep_their_order_and_get_distinct_ids():
    text = block("tool_name:「始」a「末」") + "\nand then\n" + block("tool_name:「始」b「末」")
    assert [(r.call_id, r.tool_name) for r in VCP.parse(text)] == [("vcp_1", "a"), ("vcp_2", "b")]


def test_request_id_is_read_and_repeats_made_unique():
    text = (
        block("tool_name:「始」a「末」", "request_id:「始」r1「末」")
        + block("tool_name:「始」b「末」")
        + block("tool_name:「始」c「末」", "request_id:「始」r1「末」")
        + block("tool_name:「始」d「末」", "request_id:「始」vcp_2「末」")
    )
    requests = VCP.parse(text)
    assert [r.call_id for r in requests] == ["r1", "vcp_1", "r1_2", "vcp_2"]
    assert all("request_id" not in r.arguments for r in requests)


def test_generated_ids_skip_ids_the_model_used_earlier():
    text = block("tool_name:「始」a「末」", "request_id:「始」vcp_1「末」") + block("tool_name:「始」b「末」")
    assert [r.call_id for r in VCP.parse(text)] == ["vcp_1", "vcp_2"]


def test_no_blocks_means_no_calls():
    assert VCP.parse("") == []
    assert VCP.parse("It is 21 degrees in Paris. 「Nice」 weather, x <<< y, a: b") == []


def test_repeated_key_last_value_wins():
    assert calls(block("tool_name:「始」t「末」", "a:「始」1「末」", "a:「始」2「末」")) == [("t", {"a": "2"}, [])]


# --- fences, think, result regions -----------------------------------------------------------


def test_blocks_inside_code_fences_are_parsed():
    text = (
        "Calling it:\n```Tool\n"
        + block("tool_name:「始」SciCalculator「末」", "expression:「始」1+1「末」")
        + "\n```\n"
    )
    assert calls(text) == [("SciCalculator", {"expression": "1+1"}, [])]


def test_think_regions_are_skipped_nested_and_any_case():
    hidden = block("tool_name:「始」hidden「末」")
    text = f"<think>plan <THINKING>{hidden}</thinking> {hidden}</Think>" + block("tool_name:「始」shown「末」")
    assert calls(text) == [("shown", {}, [])]


def test_unclosed_think_hides_the_rest_of_the_reply():
    text = block("tool_name:「始」first「末」") + "<think>maybe " + block("tool_name:「始」never「末」")
    assert calls(text) == [("first", {}, [])]


def test_stray_closing_think_tag_is_dropped_not_the_text_after_it():
    assert calls("done</think>\n" + block("tool_name:「始」after「末」")) == [("after", {}, [])]


def test_markers_inside_copied_result_blocks_are_ignored():
    copied = f"{RESULT_START}\ncontent:「始」{block('tool_name:「始」echoed「末」')}「末」\n{RESULT_END}"
    summary = f"{SUMMARY_START}\n- 返回内容: {block('tool_name:「始」echoed「末」')}\n{SUMMARY_END}"
    text = (
        copied
        + summary
        + "[[AIO工具调用结果信息汇总:\n"
        + block("tool_name:「始」echoed「末」")
        + "\nAIO工具调用结果结束]]"
    )
    assert calls(text + block("tool_name:「始」real「末」")) == [("real", {}, [])]


def test_unclosed_result_region_hides_the_rest():
    assert calls(f"{RESULT_START}\nstatus: ok\n" + block("tool_name:「始」x「末」")) == []


def test_result_region_end_quoted_in_an_escape_value_does_not_end_it():
    text = f"{RESULT_START}\ncontent:「始ESCAPE」{RESULT_END} {REQUEST_START}「末ESCAPE」\n{RESULT_END}"
    assert calls(text + "\n" + block("tool_name:「始」x「末」")) == [("x", {}, [])]


# --- escapes --------------------------------------------------------------------------------


def test_escape_values_hold_literal_markers_and_their_spaces():
    value = f"use 「始」 and 「末」, then {REQUEST_END} and {REQUEST_START}"
    text = block(
        "tool_name:「始」echo「末」",
        f"text:{ESCAPE_FIELD_START}{value}{ESCAPE_FIELD_END}",
        "sep:「始ESCAPE」 「末ESCAPE」",
    )
    assert calls(text) == [("echo", {"text": value, "sep": " "}, [])]


def test_escape_value_drops_one_newline_at_each_edge_and_keeps_indentation():
    text = block("tool_name:「始」run「末」", "code:「始ESCAPE」\n    if x:\n        y()\n「末ESCAPE」")
    assert calls(text)[0][1] == {"code": "    if x:\n        y()"}


def test_escaped_block_markers_inside_escape_values_are_restored():
    text = block(
        "tool_name:「始」doc「末」",
        "text:「始ESCAPE」<<<[TOOL_REQUEST_ESCAPE]>>>x<<<[END_TOOL_REQUEST_ESCAPE]>>>「末ESCAPE」",
    )
    assert calls(text)[0][1] == {"text": f"{REQUEST_START}x{REQUEST_END}"}


def test_aio_exp_variant():
    assert calls(block("tool_name:「始」t「末」", "v:「始exp」a「末」b「末exp」"))[0][1] == {"v": "a「末」b"}


def test_escape_request_block_may_contain_plain_request_markers():
    inner = block("tool_name:「始」inner「末」")
    text = "\n".join(
        [
            "<<<[TOOL_REQUEST_ESCAPE]>>>",
            "tool_name:「始」save「末」",
            f"template:「始ESCAPE」{inner}「末ESCAPE」",
            "<<<[END_TOOL_REQUEST_ESCAPE]>>>",
        ]
    )
    assert calls(text) == [("save", {"template": inner}, [])]


# --- malformed ------------------------------------------------------------------------------


def test_unclosed_field_is_an_error_naming_it_and_later_fields_survive():
    text = block("tool_name:「始」weather「末」", "city:「始」Paris", "unit:「始」celsius「末」")
    assert calls(text) == [
        ("weather", {"city": "Paris", "unit": "celsius"}, ["the value of city was not closed with 「末」"])
    ]


def test_unclosed_last_field_runs_to_the_block_end():
    assert calls(block("tool_name:「始」weather「末」", "city:「始」Paris")) == [
        ("weather", {"city": "Paris"}, ["the value of city was not closed with 「末」"])
    ]


def test_unclosed_escape_field():
    text = block("tool_name:「始」t「末」", "v:「始ESCAPE」abc")
    assert calls(text) == [("t", {"v": "abc"}, ["the value of v was not closed with 「末ESCAPE」"])]


def test_missing_tool_name_is_reported_not_dropped():
    [request] = VCP.parse(block("city:「始」Paris「末」"))
    assert (request.tool_name, request.arguments) == ("", {"city": "Paris"})
    assert request.errors == ["the tool request has no tool_name field"]


def test_unclosed_block_at_the_end_with_a_tool_name_is_an_error():
    text = "ok " + REQUEST_START + "\ntool_name:「始」weather「末」\ncity:「始」Paris「末」\n"
    [request] = VCP.parse(text)
    assert (request.tool_name, request.arguments, request.errors) == ("weather", {"city": "Paris"}, [NOT_CLOSED])
    assert "not closed" in NOT_CLOSED


def test_unclosed_block_without_a_tool_name_is_prose():
    assert VCP.parse("The marker " + REQUEST_START + " starts a call, 「始」 opens a value.") == []
    assert VCP.parse(REQUEST_START + "\ncommand1:「始」go「末」 tool_name:「始」「末」") == []


def test_block_cut_short_by_the_next_block_is_an_error_and_the_next_one_runs():
    text = REQUEST_START + "\ntool_name:「始」a「末」\n" + block("tool_name:「始」b「末」")
    assert calls(text) == [("a", {}, [NOT_CLOSED]), ("b", {}, [])]


def test_empty_tool_name_counts_as_missing():
    assert calls(block("tool_name:「始」 「末」"))[0][2] == ["the tool request has no tool_name field"]


@pytest.mark.parametrize(
    "drifted",
    [
        "<<[TOOL_REQUEST]>>\ntool_name:「始」t「末」\n<<[END_TOOL_REQUEST]>>",
        "<<<<[tool_request]>>>>\ntool_name:「始」t「末」\n<<<<[end_tool_request]>>>>",
        "<<<[Tool_Request]>>\ntool_name:「始」t「末」\n<<<[END_TOOL_REQUEST]>>>",
    ],
)
def test_block_marker_drift_needs_fuzzy(drifted: str):
    assert VCP.parse(drifted) == []
    assert calls(drifted, FUZZY) == [("t", {}, [])]


@pytest.mark.parametrize(
    ("start", "end"), [("{始}", "{末}"), ("{始」", "{末」"), ("「始}", "「末}"), ("「 始 」", "{末}")]
)
def test_field_marker_drift_needs_fuzzy(start: str, end: str):
    text = block(f"tool_name:{start}t{end}", f"a:{start}1{end}", "b：「始」2「末」")
    assert calls(text, FUZZY) == [("t", {"a": "1", "b": "2"}, [])]
    assert calls(text) == [("", {}, ["the tool request has no tool_name field"])]


def test_fuzzy_mode_still_reads_exact_markup_and_escape_variants():
    text = block("tool_name:「始」t「末」", "v:{始escape}a「末」{末Escape}")
    assert calls(text, FUZZY) == [("t", {"v": "a「末」"}, [])]


def test_fuzzy_result_regions_are_ignored_too():
    text = (
        "<<[tool_result]>>\n"
        + block("tool_name:「始」x「末」")
        + "\n<<[END_TOOL_RESULT]>>"
        + block("tool_name:「始」y「末」")
    )
    assert calls(text, FUZZY) == [("y", {}, [])]


# --- batch ----------------------------------------------------------------------------------


def test_batch_with_numbered_tool_names_splits_in_index_order():
    text = block(
        "tool_name2:「始」b「末」",
        "city2:「始」Rome「末」",
        "tool_name1:「始」a「末」",
        "city1:「始」Paris「末」",
        "unit:「始」c「末」",
    )
    assert calls(text) == [("a", {"city": "Paris", "unit": "c"}, []), ("b", {"city": "Rome", "unit": "c"}, [])]


def test_batch_with_commands_shares_the_tool_name_and_ids_follow_request_id():
    text = block(
        "tool_name:「始」FileOperator「末」",
        "request_id:「始」files「末」",
        "command1:「始」ReadFile「末」",
        "path1:「始」a.txt「末」",
        "command2:「始」ListDir「末」",
        "path2:「始」/tmp「末」",
    )
    requests = VCP.parse(text)
    assert [(r.call_id, r.tool_name, r.arguments) for r in requests] == [
        ("files_1", "FileOperator", {"command": "ReadFile", "path": "a.txt"}),
        ("files_2", "FileOperator", {"command": "ListDir", "path": "/tmp"}),
    ]


def test_numbered_keys_without_batch_keys_are_ordinary_arguments():
    assert calls(block("tool_name:「始」dist「末」", "point1:「始」[0, 0]「末」", "point2:「始」[3, 4]「末」")) == [
        ("dist", {"point1": "[0, 0]", "point2": "[3, 4]"}, [])
    ]


def test_batch_keys_whose_base_ends_in_a_digit_use_the_shortest_suffix():
    text = block(
        "tool_name1:「始」a「末」",
        "t01:「始」x「末」",
        "city11:「始」y「末」",
        "tool_name2:「始」b「末」",
        "x2:「始」z「末」",
    )
    assert calls(text) == [("a", {"t0": "x", "city1": "y"}, []), ("b", {"x": "z"}, [])]


def test_batch_entry_without_any_tool_name_is_an_error():
    text = block("tool_name1:「始」a「末」", "command2:「始」go「末」")
    assert calls(text) == [("a", {}, []), ("", {"command": "go"}, ["the tool request has no tool_name field"])]


def test_batch_errors_apply_to_every_call_of_the_block():
    text = block("tool_name1:「始」a「末」", "x1:「始」oops", "tool_name2:「始」b「末」")
    assert [r.errors for r in VCP.parse(text)] == [["the value of x1 was not closed with 「末」"]] * 2


# --- rendering ------------------------------------------------------------------------------

WEATHER = ToolDefinition(
    name="self.weather.get",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "required": ["city"],
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer"},
            "where": {
                "type": "dict",
                "properties": {"lat": {"type": "float"}, "lon": {"type": "float"}},
                "required": ["lat"],
            },
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    },
)


def test_render_tools_lists_every_tool_parameter_and_the_rules():
    prompt = VCP.render_tools([WEATHER, ToolDefinition("get_time", "The time.")])
    assert "tool_name:「始」self.weather.get「末」" in prompt
    assert "city:「始」(string, required) City name「末」" in prompt
    assert "unit:「始」(string, optional) One of: celsius, fahrenheit. Default: celsius.「末」" in prompt
    assert "where:「始」(object {lat: number, lon?: number}, optional)「末」" in prompt
    assert "tags:「始」(array of string, optional)「末」" in prompt
    assert "tool_name:「始」get_time「末」" in prompt
    assert prompt.count("<<<[TOOL_DEFINITION]>>>") == prompt.count("<<<[END_TOOL_DEFINITION]>>>") == 2
    for rule in (REQUEST_START, REQUEST_END, "tool_name1", "request_id", ESCAPE_FIELD_START):
        assert rule in prompt
    assert len(prompt) < 1800, "the prompt section costs tokens on every turn"


def test_render_tools_is_empty_without_visible_tools():
    assert VCP.render_tools([]) == ""
    assert VCP.render_tools([ToolDefinition("secret", "x", hidden=True)]) == ""


def test_rendered_definitions_are_not_calls():
    definitions = VCP.render_tools([WEATHER]).split("Available tools:")[1]
    assert "<<<[TOOL_DEFINITION]>>>" in definitions and VCP.parse(definitions) == []


def test_description_with_markers_is_escaped():
    prompt = VCP.render_tools([ToolDefinition("t", "Ends with 「末」 then more")])
    assert "description:「始ESCAPE」Ends with 「末」 then more「末ESCAPE」" in prompt


def test_render_call_round_trips_json_values_and_escapes_what_needs_it():
    arguments = {
        "n": 3,
        "ok": True,
        "xs": [1, "a"],
        "obj": {"k": None},
        "s": " padded ",
        "m": "a 「末」 <<<[TOOL_REQUEST]>>>",
    }
    text = render_call("t.x", arguments, request_id="r9")
    assert "m:「始ESCAPE」a 「末」 <<<[TOOL_REQUEST_ESCAPE]>>>「末ESCAPE」" in text
    [request] = VCP.parse(text)
    assert request.call_id == "r9" and request.tool_name == "t.x"
    assert request.arguments == {
        "n": "3",
        "ok": "true",
        "xs": '[1, "a"]',
        "obj": '{"k": null}',
        "s": " padded ",
        "m": "a 「末」 <<<[TOOL_REQUEST]>>>",
    }


_ALPHABET = st.sampled_from(
    [
        "a",
        "Z",
        " ",
        "\n",
        ",",
        ":",
        "「",
        "」",
        "{",
        "}",
        "始",
        "末",
        "<",
        ">",
        "[",
        "]",
        "TOOL_REQUEST",
        "END_",
        "ESCAPE",
        "exp",
        "<<<",
        ">>>",
        "<think>",
        "</think>",
        "```",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.lists(_ALPHABET).map("".join), max_size=4
    ),
    st.booleans(),
)
def test_any_string_value_round_trips(arguments: dict[str, str], fuzzy: bool):
    arguments = {
        k: v
        for k, v in arguments.items()
        if k not in ("tool_name", "request_id") and not re.fullmatch(r"(tool_name|command)\d+", k)
    }
    for value in arguments.values():
        assume(not re.search(r"[「{]\s*末\s*(ESCAPE|exp)\s*[」}]", value, re.IGNORECASE))  # cannot be a value
        assume(not re.search(r"_ESCAPE\]>>>", value))  # read back as the plain marker (VCPToolBox)
    [request] = VcpProtocol(fuzzy=fuzzy).parse("prose\n" + render_call("tool", arguments) + "\nmore prose")
    assert (request.tool_name, request.arguments, request.errors) == ("tool", arguments, [])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        _ALPHABET
        | st.sampled_from(
            ["tool_name", "「始」", "「末」", "「始ESCAPE」", "「末ESCAPE」", REQUEST_START, REQUEST_END, RESULT_START]
        ),
        max_size=40,
    ).map("".join),
    st.booleans(),
)
def test_parse_never_raises_and_every_request_is_well_formed(text: str, fuzzy: bool):
    for request in VcpProtocol(fuzzy=fuzzy).parse(text):
        assert request.protocol == "vcp" and request.call_id
        assert request.tool_name or request.errors


# --- results --------------------------------------------------------------------------------


def _pairs() -> list[tuple[ToolCallRequest, ToolCallResult]]:
    return [
        (
            ToolCallRequest("vcp_1", "weather", {"city": "Paris"}, protocol="vcp"),
            ToolCallResult(result="21 °C, sunny", duration_ms=12.4),
        ),
        (ToolCallRequest("r2", "fetch", protocol="vcp"), ToolCallResult.fail(f"page said {REQUEST_START} 「末」")),
    ]


def test_default_results_are_result_blocks_with_escape_safe_fields():
    text = VCP.format_results(_pairs())
    assert text.startswith(
        RESULT_START + "\ntool_name:「始」weather「末」\nrequest_id:「始」vcp_1「末」\n"
        "status:「始」success「末」\nduration_ms:「始」12「末」\ncontent:「始」21 °C, sunny「末」\n" + RESULT_END
    )
    assert "status:「始」error「末」" in text
    assert "content:「始ESCAPE」Error: page said <<<[TOOL_REQUEST_ESCAPE]>>> 「末」「末ESCAPE」" in text
    assert VCP.parse(text) == [], "results the model copies into its reply never run"


def test_vcptoolbox_summary_results():
    text = VcpProtocol(compat="vcptoolbox").format_results(_pairs())
    assert text.split("\n")[:5] == [
        SUMMARY_START,
        "- 工具名称: weather",
        "- 执行状态: ✅ SUCCESS",
        "- 返回内容: 21 °C, sunny",
        SUMMARY_END,
    ]
    assert "- 执行状态: ❌ ERROR\n- 返回内容: Error: page said <<<[TOOL_REQUEST_ESCAPE]>>> 「末」" in text
    assert VCP.parse(text) == []


def test_custom_result_template():
    protocol = VcpProtocol(result_template="[{request_id}] {tool_name} {status}: {content:field}")
    assert protocol.format_results(_pairs()[:1]) == "[vcp_1] weather success: 「始」21 °C, sunny「末」"
    assert VCP.format_results([]) == ""


def test_field_value_picks_the_plain_form_when_it_can():
    assert field_value("Paris") == "「始」Paris「末」"
    assert field_value("") == "「始」「末」"
    assert field_value("\nx") == "「始ESCAPE」\n\nx「末ESCAPE」"
