"""The BFCL corpus through the XML protocol: render every ground-truth call, corrupt the reply the
way models do, parse it back, coerce against the function's schema, and check BFCL accepts it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from vixio.core.tools.arguments import coerce_object, schema_types
from vixio.core.tools.protocols.xml import XmlProtocol, render_calls
from vixio.testing import bfcl

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(bfcl.data_dir() is None, reason="BFCL corpus not found (set VIXIO_BFCL_DIR)"),
]

xml = XmlProtocol()


def _crlf(block: str) -> str:
    return block.replace("\n", "\r\n")


def _no_block_close(block: str) -> str:
    return block.removesuffix("</function_calls>")


def _no_parameter_close(block: str) -> str:
    return block.replace("</parameter>", "")


def _no_invoke_close(block: str) -> str:
    return block.replace("</invoke>\n", "")


def _namespace(block: str) -> str:
    return block.replace("function_calls>", "minimax:function_calls>").replace("<invoke", "<minimax:invoke")


def _single_quotes(block: str) -> str:
    return re.sub(r'name="([^"]*)">', r"name='\1'>", block)


def _fenced(block: str) -> str:
    return f"```xml\n{block}\n```"


def _everything(block: str) -> str:
    return _fenced(_crlf(_no_block_close(_no_parameter_close(_no_invoke_close(_namespace(_single_quotes(block)))))))


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "clean": lambda block: block,
    "crlf": _crlf,
    "no </function_calls>": _no_block_close,
    "no </parameter>": _no_parameter_close,
    "no </invoke>": _no_invoke_close,
    "namespace prefix": _namespace,
    "single quotes": _single_quotes,
    "fenced": _fenced,
    "all at once": _everything,
}


EXCLUDED: dict[str, set[str]] = {
    # A Python expression ("data['sales']") as the value of an array parameter.
    "parallel_multiple": {"parallel_multiple_21"},
    # Parameters whose list of acceptable values is empty: nothing, not even leaving it out, passes.
    "live_simple": {"live_simple_106-63-0", "live_simple_112-68-0"},
    # True for a string enum of "True"/"False"/"dontcare", 2 for a string enum of "1"/"2"/"3", None
    # for a required string.
    "live_multiple": {
        "live_multiple_552-153-1",
        "live_multiple_731-167-2",
        "live_multiple_733-167-4",
        "live_multiple_735-167-6",
        "live_multiple_595-158-1",
        "live_multiple_596-158-2",
        "live_multiple_1038-265-0",
    },
}
"""Cases whose ground truth no text reply can produce (see `representable_arguments`)."""


def _reply(block: str) -> str:
    return f'Let me check: 3 < 4 & that\'s "it".\n{block}\nOne moment <please>.'


def representable_arguments(case: bfcl.BfclCase, call: bfcl.BfclCall) -> dict[str, Any] | None:
    """Per parameter, the first acceptable value its schema allows, or nothing when BFCL lets it be
    left out; None when a parameter has neither.

    Some ground truths contradict their own schema (`False` for a string enum of "True"/"False"/
    "dontcare", `None` for a string, an empty list of acceptable values): a text protocol writes
    strings and the schema keeps them strings, so no reply can produce those values.
    """
    properties = case.schema(call.name).get("properties", {})
    arguments: dict[str, Any] = {}
    for param, values in call.acceptable.items():
        types = schema_types(properties.get(param, {}))
        usable = [
            v
            for v in values
            if v != "" and (not types or _json_kind(v) in types or _json_kind(v) == "integer" and "number" in types)
        ]
        if usable:
            arguments[param] = usable[0]
        elif "" not in values:
            return None
    return arguments


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number" if isinstance(value, float) and not value.is_integer() else "integer"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def roundtrip_failures(case: bfcl.BfclCase, corrupt: Callable[[str], str]) -> list[str]:
    arguments = [representable_arguments(case, call) for call in case.calls]
    block = render_calls([(call.name, args) for call, args in zip(case.calls, arguments, strict=True)])
    parsed = xml.parse(_reply(corrupt(block)))
    if [p.tool_name for p in parsed] != [c.name for c in case.calls]:
        return [f"{case.id}: calls {[p.tool_name for p in parsed]} != {[c.name for c in case.calls]}"]
    failures = []
    for request, expected in zip(parsed, case.calls, strict=True):
        arguments = coerce_object(request.arguments, case.schema(expected.name))
        if request.errors or not expected.accepts(arguments):
            failures.append(f"{case.id}: {expected.name}{request.errors} {arguments} not in {expected.acceptable}")
    return failures


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_bfcl_calls_survive_the_xml_round_trip(category: str, corruption: str) -> None:
    cases = list(bfcl.load(category))
    assert cases, f"no {category} cases"
    usable = [c for c in cases if all(representable_arguments(c, call) is not None for call in c.calls)]
    excluded = sorted({c.id for c in cases} - {c.id for c in usable})
    failures = [f for case in usable for f in roundtrip_failures(case, CORRUPTIONS[corruption])]
    calls = sum(len(case.calls) for case in usable)
    print(
        f"{category} / {corruption}: {len(usable)} cases, {calls} calls, {len(failures)} failed; "
        f"{len(excluded)} excluded"
    )
    assert set(excluded) == EXCLUDED.get(category, set())
    assert not failures, "\n".join(failures[:50])
