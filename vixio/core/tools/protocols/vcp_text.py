"""The VCP text vixio writes: markers, the prompt section, request blocks, result messages.

The parser (`vcp.py`) reads what models write; this module is the other direction, and the
marker constants both share. Any value that could be misread is written in the ESCAPE form
(`「始ESCAPE」...「末ESCAPE」`), and request markers inside results are defused, so a result the
model repeats can never become a call.
"""

from __future__ import annotations

import json
import re
import string
from typing import Any

from vixio.core.tools.arguments import normalize_schema
from vixio.core.tools.types import ToolDefinition

REQUEST_START, REQUEST_END = "<<<[TOOL_REQUEST]>>>", "<<<[END_TOOL_REQUEST]>>>"
ESCAPE_REQUEST_START, ESCAPE_REQUEST_END = "<<<[TOOL_REQUEST_ESCAPE]>>>", "<<<[END_TOOL_REQUEST_ESCAPE]>>>"
RESULT_START, RESULT_END = "<<<[TOOL_RESULT]>>>", "<<<[END_TOOL_RESULT]>>>"
DEFINITION_START, DEFINITION_END = "<<<[TOOL_DEFINITION]>>>", "<<<[END_TOOL_DEFINITION]>>>"
SUMMARY_START, SUMMARY_END = "[[VCP调用结果信息汇总:", "VCP调用结果结束]]"
AIO_SUMMARY_START, AIO_SUMMARY_END = "[[AIO工具调用结果信息汇总:", "AIO工具调用结果结束]]"
FIELD_START, FIELD_END = "「始」", "「末」"
ESCAPE_FIELD_START, ESCAPE_FIELD_END = "「始ESCAPE」", "「末ESCAPE」"

ESCAPED_LITERALS = {
    f"<<<[{label}_ESCAPE]>>>": f"<<<[{label}]>>>"
    for label in ("TOOL_REQUEST", "END_TOOL_REQUEST", "TOOL_RESULT", "END_TOOL_RESULT")
}
"""Literal markers inside an ESCAPE value, as written (key) and as meant (value) — VCPToolBox's map."""
_ANY_ESCAPE_END = re.compile(r"[「{]\s*末\s*(?:ESCAPE|exp)\s*[」}]", re.IGNORECASE)
_NEEDS_ESCAPE = re.compile(r"[「{]\s*[始末]|[始末]\s*[」}]|<<|>>|(?i:<\s*think)|\A\s|\s\Z")


def render_call(name: str, arguments: dict[str, Any], *, request_id: str | None = None) -> str:
    """One call as a request block: strings as they are, other values as JSON; any value that
    could be misread (markers, `<<`, edge spaces) in escape form. Keys must be word characters."""
    fields = [_field("tool_name", name)]
    if request_id is not None:
        fields.append(_field("request_id", request_id))
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        fields.append(_field(key, text))
    return "\n".join([REQUEST_START, *fields, REQUEST_END])


def field_value(text: str) -> str:
    """`text` between 「始」 and 「末」, or in the escape form when it must be.

    Lossy only for text that cannot be a value: any spelling of `「末ESCAPE」`/`「末exp」` (written
    「末」) and the literal `<<<[..._ESCAPE]>>>` markers (read back without _ESCAPE)."""
    if not _NEEDS_ESCAPE.search(text):
        return f"{FIELD_START}{text}{FIELD_END}"
    text = _ANY_ESCAPE_END.sub(FIELD_END, text)
    for escaped, literal in ESCAPED_LITERALS.items():
        text = text.replace(literal, escaped)
    lead = "\n" if text.startswith("\n") else ""
    trail = "\n" if text.endswith("\n") else ""
    return f"{ESCAPE_FIELD_START}{lead}{text}{trail}{ESCAPE_FIELD_END}"


def _field(key: str, text: str) -> str:
    return f"{key}:{field_value(text)}"


def defuse(text: str) -> str:
    """Request markers as their _ESCAPE literals: quoted markup must not become a call."""
    return text.replace(REQUEST_START, ESCAPE_REQUEST_START).replace(REQUEST_END, ESCAPE_REQUEST_END)


USAGE = f"""\
## Tools
To use a tool, write a request block in your reply (the user neither sees nor hears it):
{REQUEST_START}
tool_name:「始」the tool's name「末」
parameter_name:「始」value「末」
{REQUEST_END}
- Every value sits between 「始」 and 「末」: text as it is, numbers and true/false plainly, lists and objects as JSON.
- Several calls: one block per call, or one block with numbered keys \
(tool_name1, city1, tool_name2, city2: every key of call N ends in N).
- Optional request_id:「始」id「末」 names a call; its result carries the same request_id.
- A value containing 「始」, 「末」 or <<< >>> markers is written 「始ESCAPE」value「末ESCAPE」.
- Results arrive in the next message.
Available tools:"""

RESULT_TEMPLATE = f"""\
{RESULT_START}
tool_name:{{tool_name:field}}
request_id:{{request_id:field}}
status:{{status:field}}
duration_ms:{{duration_ms:field}}
content:{{content:field}}
{RESULT_END}"""
"""`duration_ms` is the `durationMs` of docs/tool-systems.md §4.2: how long the call took, in whole milliseconds."""

SUMMARY_TEMPLATE = f"""\
{SUMMARY_START}
- 工具名称: {{tool_name}}
- 执行状态: {{status_mark}}
- 返回内容: {{content}}
{SUMMARY_END}"""
"""VCPToolBox's result summary (`vcpInfoHandler.js formatVcpInfoToText`)."""


class ResultFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "field":
            return field_value(str(value))
        formatted: str = super().format_field(value, format_spec)
        return formatted


def definition(tool: ToolDefinition) -> str:
    """One tool's definition block (docs/tool-systems.md §4.1): tool_name, command (the source's own
    name), description, the parameters as a JSON list (name, type, required, default) and one
    readable line each (with description and allowed values), and an example call's fields."""
    schema = normalize_schema(tool.parameters)
    required = set(schema.get("required") or [])
    properties = {key: spec if isinstance(spec, dict) else {} for key, spec in (schema.get("properties") or {}).items()}
    lines = [DEFINITION_START, _field("tool_name", tool.name), _field("command", tool.source_name)]
    if tool.description:
        lines.append(_field("description", tool.description.strip()))
    parameters = []
    for key, spec in properties.items():
        entry: dict[str, Any] = {"name": key, "type": _type_label(spec), "required": key in required}
        if "default" in spec:
            entry["default"] = spec["default"]
        parameters.append(entry)
    lines.append(_field("parameters", json.dumps(parameters, ensure_ascii=False, separators=(",", ":"))))
    for key, spec in properties.items():
        label = f"({_type_label(spec)}, {'required' if key in required else 'optional'})"
        lines.append(_field(key, " ".join(part for part in (label, *_notes(spec)) if part)))
    example = {key: _example_value(spec) for key, spec in properties.items() if key in required}
    # The example's fields without the request markers: a definition must never read as a call.
    lines.append(_field("example", "\n".join(render_call(tool.name, example).splitlines()[1:-1])))
    lines.append(DEFINITION_END)
    return "\n".join(lines)


def _example_value(spec: dict[str, Any]) -> Any:
    """A plausible value for an example call: the default, the first allowed value, or one of the type."""
    if "default" in spec:
        return spec["default"]
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return spec["enum"][0]
    kind = spec.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    minimum = spec.get("minimum")
    examples: dict[str, Any] = {
        "integer": minimum if isinstance(minimum, int) else 1,
        "number": minimum if isinstance(minimum, int | float) else 1.5,
        "boolean": True,
        "array": [],
        "object": {},
    }
    return examples.get(str(kind), "...")


def _notes(spec: dict[str, Any]) -> list[str]:
    notes = [str(spec.get("description") or "").strip()]
    if isinstance(spec.get("enum"), list):
        notes.append("One of: " + ", ".join(_plain(v) for v in spec["enum"]) + ".")
    if "default" in spec and len(_plain(spec["default"])) <= 40:
        notes.append(f"Default: {_plain(spec['default'])}.")
    return notes


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _type_label(spec: dict[str, Any], depth: int = 0) -> str:
    """A compact type: `integer`, `array of string`, `object {name: string, age?: integer}`."""
    for key in ("anyOf", "oneOf"):
        if isinstance(spec.get(key), list):
            return " | ".join(_type_label(s, depth) for s in spec[key] if isinstance(s, dict)) or "any"
    kind = spec.get("type")
    kind = " | ".join(kind) if isinstance(kind, list) else kind or "any"
    if kind == "array" and isinstance(spec.get("items"), dict) and depth < 3:
        return f"array of {_type_label(spec['items'], depth + 1)}"
    properties = spec.get("properties")
    if kind == "object" and isinstance(properties, dict) and properties and depth < 3:
        required = set(spec.get("required") or [])
        inner = ", ".join(
            f"{name}{'' if name in required else '?'}: {_type_label(sub if isinstance(sub, dict) else {}, depth + 1)}"
            for name, sub in properties.items()
        )
        return f"object {{{inner}}}"
    return str(kind)
