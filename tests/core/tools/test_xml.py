"""XmlProtocol: rendering the tools, parsing the calls models really write, formatting results."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vixio.core.tools.protocols.xml import _VALUE_END, XmlProtocol, render_call, render_calls
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition

pytestmark = pytest.mark.unit

xml = XmlProtocol()


def calls(text: str) -> list[tuple[str, dict[str, object], list[str]]]:
    return [(c.tool_name, c.arguments, c.errors) for c in xml.parse(text)]


def ok(name: str, **arguments: object) -> tuple[str, dict[str, object], list[str]]:
    return (name, arguments, [])


# (id, reply, expected calls) — the malformed shapes models write (docs/tool-protocols.md, "XML").
CASES = [
    (
        "plain",
        '<function_calls>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        "</invoke>\n</function_calls>",
        [ok("get_weather", city="Paris")],
    ),
    (
        "prose around",
        'Let me look. 3 < 4 & "so"\n<function_calls><invoke name="a"><parameter name="x">1'
        "</parameter></invoke></function_calls>\nOne moment <b>please</b>.",
        [ok("a", x="1")],
    ),
    (
        "raw < & quotes",
        '<function_calls><invoke name="calc"><parameter name="expr">1 < 2 & 3 > "x" \'y\''
        "</parameter></invoke></function_calls>",
        [ok("calc", expr="1 < 2 & 3 > \"x\" 'y'")],
    ),
    (
        "code value",
        '<function_calls><invoke name="run"><parameter name="code">\nif a < b and c > d:\n'
        '    print("<tag>", a & b)\n</parameter></invoke></function_calls>',
        [ok("run", code='if a < b and c > d:\n    print("<tag>", a & b)')],
    ),
    (
        "closing tag quoted in code",
        '<function_calls><invoke name="run"><parameter name="code">\n'
        'close = "</parameter>" + "</parameter" + "</parameters>"\n</parameter>\n'
        "</invoke></function_calls>",
        [ok("run", code='close = "</parameter>" + "</parameter" + "</parameters>"')],
    ),
    (
        "json values",
        '<function_calls><invoke name="f"><parameter name="items">["a", "b"]</parameter>'
        '<parameter name="opts">{"deep": {"x": 1}}</parameter></invoke></function_calls>',
        [ok("f", items='["a", "b"]', opts='{"deep": {"x": 1}}')],
    ),
    (
        "namespace prefix",
        '<minimax:function_calls>\n<invoke name="a">\n<parameter name="x">1</parameter>\n'
        "</invoke>\n</minimax:function_calls>",
        [ok("a", x="1")],
    ),
    (
        "namespaced tool_call",
        '<minimax:tool_call>\n<minimax:invoke name="a">\n<minimax:parameter name="x">1'
        "</minimax:parameter>\n</minimax:invoke>\n</minimax:tool_call>",
        [ok("a", x="1")],
    ),
    (
        "single quotes",
        "<function_calls><invoke name='a'><parameter name='x'>1</parameter></invoke></function_calls>",
        [ok("a", x="1")],
    ),
    (
        "unquoted names",
        "<function_calls><invoke name=a><parameter name=x>1</parameter></invoke></function_calls>",
        [ok("a", x="1")],
    ),
    (
        "upper case tags",
        '<FUNCTION_CALLS><Invoke name="a"><PARAMETER name="x">1</PARAMETER></Invoke></FUNCTION_CALLS>',
        [ok("a", x="1")],
    ),
    (
        "missing </parameter> before <parameter>",
        '<function_calls><invoke name="a">\n<parameter name="x">1\n'
        '<parameter name="y">2</parameter>\n</invoke></function_calls>',
        [ok("a", x="1", y="2")],
    ),
    (
        "missing </parameter> before </invoke>",
        '<function_calls><invoke name="a">\n<parameter name="x">1\n</invoke></function_calls>',
        [ok("a", x="1")],
    ),
    (
        "missing </invoke> before <invoke>",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter>\n'
        '<invoke name="b"><parameter name="y">2</parameter></invoke>'
        "</function_calls>",
        [ok("a", x="1"), ok("b", y="2")],
    ),
    (
        "missing </invoke> before </function_calls>",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter>\n</function_calls> Done.',
        [ok("a", x="1")],
    ),
    (
        "missing </invoke> at the end",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter>\n',
        [ok("a", x="1")],
    ),
    (
        "missing </function_calls>",
        'Sure.\n<function_calls>\n<invoke name="a"><parameter name="x">1</parameter></invoke>\n',
        [ok("a", x="1")],
    ),
    (
        "missing </function_calls> then prose",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter></invoke>\nI turned it down.',
        [ok("a", x="1")],
    ),
    ("no parameters", '<function_calls><invoke name="get_time"></invoke></function_calls>', [ok("get_time")]),
    (
        "two invokes",
        '<function_calls>\n<invoke name="a"><parameter name="x">1</parameter></invoke>\n'
        '<invoke name="b"><parameter name="y">2</parameter></invoke>\n</function_calls>',
        [ok("a", x="1"), ok("b", y="2")],
    ),
    (
        "two blocks",
        'First <function_calls><invoke name="a"></invoke></function_calls> then '
        '<function_calls><invoke name="b"></invoke></function_calls> end',
        [ok("a"), ok("b")],
    ),
    (
        "text between invokes and params",
        '<function_calls>\nnote\n<invoke name="a">\nhmm <parameter name="x">1'
        '</parameter> and\n</invoke> more\n<invoke name="b"></invoke>'
        "</function_calls>",
        [ok("a", x="1"), ok("b")],
    ),
    (
        "same value twice",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter>'
        '<parameter name="x">1</parameter></invoke></function_calls>',
        [ok("a", x="1")],
    ),
    (
        "different values twice",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter>'
        '<parameter name="x">2</parameter></invoke></function_calls>',
        [("a", {"x": "1"}, ["parameter 'x' is given twice with different values"])],
    ),
    (
        "crlf",
        '<function_calls>\r\n<invoke name="a">\r\n<parameter name="x">\r\nline 1\r\nline 2\r\n</parameter>'
        "\r\n</invoke>\r\n</function_calls>\r\n",
        [ok("a", x="line 1\nline 2")],
    ),
    (
        "one newline stripped each side",
        '<function_calls><invoke name="a"><parameter name="x">\n\n  x  \n\n'
        '</parameter><parameter name="y">  y  </parameter></invoke></function_calls>',
        [ok("a", x="\n  x  \n", y="  y  ")],
    ),
    (
        "inside think",
        '<think>maybe <function_calls><invoke name="no"></invoke></function_calls></think>'
        '<function_calls><invoke name="yes"></invoke></function_calls>',
        [ok("yes")],
    ),
    ("inside thinking", '<thinking><function_calls><invoke name="no"></invoke></function_calls></thinking>ok', []),
    (
        "unclosed think hides the rest",
        '<think>plan: <function_calls><invoke name="no"></invoke></function_calls> and more',
        [],
    ),
    (
        "inside results",
        "<function_results><result><tool_name>a</tool_name><stdout><function_calls>"
        '<invoke name="no"></invoke></function_calls></stdout></result></function_results>'
        '<function_calls><invoke name="yes"></invoke></function_calls>',
        [ok("yes")],
    ),
    (
        "fenced",
        'Here:\n```xml\n<function_calls>\n<invoke name="a">\n<parameter name="x">1</parameter>\n</invoke>\n'
        "</function_calls>\n```\n",
        [ok("a", x="1")],
    ),
    (
        "entities decoded",
        '<function_calls><invoke name="a"><parameter name="x">&lt;b&gt; AT&amp;T &quot;q&quot;'
        '</parameter><parameter name="y">&copy; &#60;</parameter></invoke></function_calls>',
        [ok("a", x='<b> AT&T "q"', y="&copy; &#60;")],
    ),
    (
        "entities kept next to a raw <",
        '<function_calls><invoke name="a"><parameter name="x">a < b &lt; c</parameter></invoke></function_calls>',
        [ok("a", x="a < b &lt; c")],
    ),
    (
        "CJK",
        '好的。<function_calls><invoke name="播放音乐"><parameter name="歌名">晴天</parameter></invoke>'
        "</function_calls>",
        [ok("播放音乐", 歌名="晴天")],
    ),
    ("no calls", 'Just a sentence with <b>tags</b>, a < b and <invoke name="bare"></invoke>.', []),
    ("empty block", "<function_calls></function_calls>", []),
    # Truncated streams: the model is told, the tool is not run.
    (
        "cut inside a value",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter><parameter name="y">half a val',
        [("a", {"x": "1"}, ["the reply ended inside parameter 'y'; write the whole call again"])],
    ),
    (
        "cut inside a parameter tag",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter><param',
        [("a", {"x": "1"}, ["the reply ended inside a <parameter> tag; write the whole call again"])],
    ),
    (
        "cut inside the invoke tag",
        '<function_calls><invoke name="get_wea',
        [("get_wea", {}, ["the reply ended inside the <invoke> tag"])],
    ),
    ("cut before the name", "<function_calls>\n<inv", [("", {}, ["the reply ended inside the <invoke> tag"])]),
    ("cut after the opening tag", "Sure. <function_calls>\n", []),
    (
        "cut inside a closing tag",
        '<function_calls><invoke name="a"><parameter name="x">1</parameter></inv',
        [ok("a", x="1")],
    ),
]


@pytest.mark.parametrize(("reply", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse(reply: str, expected: list[tuple[str, dict[str, object], list[str]]]) -> None:
    assert calls(reply) == expected


def test_requests_are_xml_calls_with_their_markup() -> None:
    reply = 'Hi <function_calls>\n<invoke name="a">\n<parameter name="x">1</parameter>\n</invoke>\n</function_calls>'
    [request] = xml.parse(reply)
    assert request.protocol == "xml"
    assert request.call_id == ""  # the executor numbers calls
    assert request.raw == '<invoke name="a">\n<parameter name="x">1</parameter>\n</invoke>'


def test_schemas_coerce_the_named_tools_only() -> None:
    reply = render_calls(
        [("set", {"level": "30", "on": "yes", "tags": '["a"]', "name": "42"}), ("other", {"level": "30"})]
    )
    schema = {
        "type": "dict",
        "properties": {
            "level": {"type": "integer"},
            "on": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "name": {"type": "string"},
        },
    }
    first, second = xml.parse(reply, schemas={"set": schema})
    assert first.arguments == {"level": 30, "on": True, "tags": ["a"], "name": "42"}
    assert second.arguments == {"level": "30"}


def test_render_tools() -> None:
    tools = [
        ToolDefinition(
            "get_weather",
            "Weather for a city",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        ),
        ToolDefinition("get_time", "现在几点"),
    ]
    prompt = xml.render_tools(tools)
    body = prompt.split("<functions>\n", 1)[1].split("\n</functions>", 1)[0]
    specs = [json.loads(line.removeprefix("<function>").removesuffix("</function>")) for line in body.splitlines()]
    assert specs == [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]
    assert list(specs[0]) == ["name", "description", "parameters"]
    assert "现在几点" in prompt  # not \u-escaped
    example = prompt[prompt.index("<function_calls>") : prompt.index("</function_calls>") + len("</function_calls>")]
    assert calls(example) == [ok("FUNCTION_NAME", PARAMETER_NAME="value")]
    assert "lists and objects as JSON" in prompt
    assert xml.render_tools([]) == ""


def test_format_results() -> None:
    pairs = [
        (ToolCallRequest("c1", "get_weather", protocol="xml"), ToolCallResult.ok("sunny, 21 °C")),
        (ToolCallRequest("c2", "set_volume", protocol="xml"), ToolCallResult.fail("level must be <= 100")),
    ]
    assert xml.format_results(pairs) == (
        "<function_results>\n"
        "<result>\n<tool_name>get_weather</tool_name>\n<stdout>\nsunny, 21 °C\n</stdout>\n</result>\n"
        "<result>\n<tool_name>set_volume</tool_name>\n<error>\nlevel must be <= 100\n</error>\n</result>\n"
        "</function_results>"
    )
    assert xml.format_results([]) == ""


def test_results_echoed_by_the_model_are_not_calls() -> None:
    echoed = xml.format_results([(ToolCallRequest("c", "a"), ToolCallResult.ok(render_call("a", {"x": 1})))])
    assert xml.parse(echoed + "\nDone.") == []


def test_render_call() -> None:
    arguments = {"s": "x", "n": 5, "f": 0.5, "ok": True, "none": None, "l": [1, "2"], "d": {"k": "v"}}
    assert render_call("a.b", arguments) == (
        '<function_calls>\n<invoke name="a.b">\n'
        '<parameter name="s">x</parameter>\n<parameter name="n">5</parameter>\n<parameter name="f">0.5</parameter>\n'
        '<parameter name="ok">true</parameter>\n<parameter name="none">null</parameter>\n'
        '<parameter name="l">[1, "2"]</parameter>\n<parameter name="d">{"k": "v"}</parameter>\n'
        "</invoke>\n</function_calls>"
    )


_value_text = st.lists(
    st.sampled_from(list("ab <>&;/\"'\n\t=好") + ["&lt;", "&amp;", "</parameter>", "</parameter"]), max_size=30
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(["a", "level", "code", "x_y", "名字"]), _value_text, max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_rendered_strings_parse_back_unchanged(argument_sets: list[dict[str, str]]) -> None:
    """Any value round-trips unless it contains one of the tags that structure a call."""
    argument_sets = [{k: v for k, v in args.items() if not _VALUE_END.search(v)} for args in argument_sets]
    reply = "Okay. " + render_calls([(f"tool_{i}", args) for i, args in enumerate(argument_sets)]) + " Done."
    assert calls(reply) == [ok(f"tool_{i}", **args) for i, args in enumerate(argument_sets)]


def test_results_in_the_seed_003_event_form() -> None:
    import json as _json
    from datetime import datetime as _dt

    from vixio.core.tools.protocols.xml import XmlProtocol as _Xml
    from vixio.core.tools.protocols.xml import tool_result_event
    from vixio.core.tools.types import ToolCallRequest as _Req
    from vixio.core.tools.types import ToolCallResult as _Res

    pairs = [
        (_Req("c1", "check_availability"), _Res(result='{"available":true,"room":"观星阁"}', duration_ms=3.2)),
        (_Req("c2", "book"), _Res.fail("no such room")),
    ]
    event = _json.loads(tool_result_event(pairs, now=_dt(2024, 1, 1, 12)))
    assert event == {
        "type": "tool_result",
        "timestamp": "2024-01-01T12:00:00",
        "data": {
            "results": [
                {
                    "tool_name": "check_availability",
                    "success": True,
                    "result": {"available": True, "room": "观星阁"},
                    "duration_ms": 3,
                },
                {"tool_name": "book", "success": False, "result": "no such room"},
            ]
        },
    }
    assert _json.loads(_Xml(result_format="event").format_results(pairs))["type"] == "tool_result"
    assert "<function_results>" in _Xml().format_results(pairs)
