"""The XML text tool protocol: `<function_calls><invoke name=…><parameter name=…>` (docs/tool-systems.md §4.3).

For models without native function calling. The tools go into the system prompt as JSON Schema
inside `<functions>`; the model answers with

    <function_calls>
    <invoke name="set_volume">
    <parameter name="level">30</parameter>
    </invoke>
    </function_calls>

and the results come back as a user turn inside `<function_results>`.

The model's output is not XML: values hold raw `<`, `&`, quotes and code, so a strict XML parser
fails on them (docs/tool-protocols.md, "XML"). The parser is a scanner over a fixed tag vocabulary that forgives
what models get wrong:

- namespace prefixes (`<minimax:function_calls>`), `<tool_call>` as the wrapper (MiniMax-M2
  writes the same invoke grammar inside it), any tag-name case, names in '…' or "…";
- a missing `</parameter>` ends at the next `<parameter`/`</invoke>`; a missing `</invoke>` at the
  next `<invoke`/`</function_calls>` or the end of the reply; a missing `</function_calls>` is
  not needed;
- a value may quote `</parameter>` (code): the value ends at the last `</parameter>` before the
  next tag when only whitespace follows it, else at the first;
- XML entities (`&lt;` `&gt;` `&amp;` `&quot;` `&apos;`) are decoded only in a value without a raw
  `<`: a model that escapes writes `&lt;` for every `<`, so a raw `<` means `&lt;` is literal;
- calls inside `<think>`/`<thinking>` or `<function_results>` are not calls; an unclosed one hides
  the rest of the reply.

A reply that ends inside a parameter value gives a request with `errors` (the model is told, the
tool does not run). Bare `<invoke>` tags outside a wrapper are not calls: the speech filter would
speak them, and text the user heard must not also act.

Values stay strings; `parse(text, schemas)` coerces them when given the tools' schemas, and the
executor coerces and validates against the schema anyway (`vixio.core.tools.arguments`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from vixio.core.tools.arguments import coerce_object, normalize_schema
from vixio.core.tools.protocols.base import TextToolProtocol
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition

_NS = r"(?:[A-Za-z_][\w.-]{0,31}:)?"
_WRAPPER = r"(?:function_calls|tool_call)"
_ATTRS = r"""((?:[^<>"']|"[^"]*"|'[^']*')*)"""
"""A tag's attributes: quoted values may hold `>`."""

_BLOCK_OPEN = re.compile(rf"<{_NS}{_WRAPPER}\s*>", re.IGNORECASE)
_IGNORED_OPEN = re.compile(rf"<(think|thinking|{_NS}function_results)\s*>", re.IGNORECASE)
_INVOKE_OPEN = rf"<{_NS}invoke\b{_ATTRS}>"
_PARAM_OPEN = rf"<{_NS}parameter\b{_ATTRS}>"
_PARAM_CLOSE = re.compile(rf"</{_NS}parameter\s*>", re.IGNORECASE)

_TOP = re.compile(rf"(?P<block>{_BLOCK_OPEN.pattern})|(?P<ignored>{_IGNORED_OPEN.pattern})", re.IGNORECASE)
_IN_BLOCK = re.compile(
    rf"(?P<invoke>{_INVOKE_OPEN})|(?P<close></{_NS}{_WRAPPER}\s*>)"
    rf"|(?P<other>{_BLOCK_OPEN.pattern}|{_IGNORED_OPEN.pattern})",
    re.IGNORECASE,
)
_IN_INVOKE = re.compile(
    rf"(?P<param>{_PARAM_OPEN})|(?P<close></{_NS}invoke\s*>)"
    rf"|(?P<other>{_INVOKE_OPEN}|</?{_NS}{_WRAPPER}\s*>|{_IGNORED_OPEN.pattern})",
    re.IGNORECASE,
)
_VALUE_END = re.compile(
    rf"{_PARAM_OPEN}|</{_NS}invoke\s*>|{_INVOKE_OPEN}|</?{_NS}{_WRAPPER}\s*>",
    re.IGNORECASE,
)
"""The tags that end a value whose `</parameter>` is missing."""
_CUT_TAG = re.compile(rf"<{_NS}([A-Za-z_]+)(\s[^<>]*)?$")
"""A tag the reply ended inside."""
_NAME_ATTR = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"?|'([^']*)'?|([^\s"'>]+))""", re.IGNORECASE)
"""Closing quote optional: a tag cut off mid-name still names the tool."""
_IGNORED_CLOSE = {
    tag: re.compile(rf"</{_NS}{tag}\s*>", re.IGNORECASE) for tag in ("think", "thinking", "function_results")
}
_ENTITY = re.compile(r"&(lt|gt|amp|quot|apos|#39);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'", "#39": "'"}

_INSTRUCTIONS = """\
To call functions, write a block like this in your reply:
<function_calls>
<invoke name="FUNCTION_NAME">
<parameter name="PARAMETER_NAME">value</parameter>
</invoke>
</function_calls>
Put several <invoke> elements in one block to call several functions. Write strings and numbers \
as they are, lists and objects as JSON; the block is not XML, so do not escape anything. Use only \
the function and parameter names above and give every required parameter. The block is not read \
to the user. If no function is needed, answer the user directly, without a block. The results come back in the next message inside <function_results>."""
_EVENT_INSTRUCTIONS_TAIL = "The results come back in the next message as a tool_result event (JSON)."


ResultFormat = Literal["function_results", "event"]
"""How results go back: `<function_results>` markup, or docs/tool-systems.md §4.4's `tool_result` event JSON."""


class XmlProtocol(TextToolProtocol):
    """Tools as `<functions>` JSON Schema, calls as `<function_calls>`, results as
    `<function_results>` (or, with `result_format="event"`, the event form of docs/tool-systems.md §4.4:
    `{"type":"tool_result","timestamp":…,"data":{"results":[{"tool_name","success","result"}]}}`)."""

    name = "xml"

    def __init__(self, result_format: ResultFormat = "function_results") -> None:
        self.result_format = result_format

    def render_tools(self, tools: Sequence[ToolDefinition]) -> str:
        if not tools:
            return ""
        lines = ["You can call these functions; here they are in JSONSchema format:", "<functions>"]
        for tool in tools:
            spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
            lines.append(f"<function>{json.dumps(spec, ensure_ascii=False, separators=(',', ':'))}</function>")
        instructions = _INSTRUCTIONS
        if self.result_format == "event":
            instructions = instructions.replace(
                "The results come back in the next message inside <function_results>.", _EVENT_INSTRUCTIONS_TAIL
            )
        lines += ["</functions>", "", instructions]
        return "\n".join(lines)

    def parse(self, text: str, schemas: Mapping[str, dict[str, Any]] | None = None) -> list[ToolCallRequest]:
        """Every call in a finished reply, in order.

        Argument values are the strings the model wrote (one leading and one trailing newline
        removed, CRLF read as LF, entities decoded as above). With
        `schemas` (tool name → parameters JSON Schema) they are coerced to the schema's types
        (`"30"` → 30, JSON text → list/object) for the tools named there.
        """
        calls: list[ToolCallRequest] = []
        pos = 0
        while (found := _TOP.search(text, pos)) is not None:
            if found.group("ignored"):
                pos = _skip_ignored(text, found)
            else:
                pos = _parse_block(text, found.end(), calls)
        if schemas:
            for call in calls:
                schema = schemas.get(call.tool_name)
                if schema is not None:
                    call.arguments = coerce_object(call.arguments, normalize_schema(schema))
        return calls

    def format_results(self, results: Sequence[tuple[ToolCallRequest, ToolCallResult]]) -> str:
        if not results:
            return ""
        if self.result_format == "event":
            return tool_result_event(results)
        parts = ["<function_results>"]
        for request, result in results:
            parts += ["<result>", f"<tool_name>{request.tool_name}</tool_name>"]
            if result.success:
                parts += ["<stdout>", result.result or "", "</stdout>"]
            else:
                parts += ["<error>", result.error or "failed", "</error>"]
            parts.append("</result>")
        parts.append("</function_results>")
        return "\n".join(parts)


def tool_result_event(results: Sequence[tuple[ToolCallRequest, ToolCallResult]], *, now: datetime | None = None) -> str:
    """Seed 003 §6.2: results as one `tool_result` event; a JSON result is embedded as JSON, an
    error is the error text with `"success": false`. `duration_ms` is added per result."""
    entries = []
    for request, result in results:
        value: Any = result.result if result.success else (result.error or "failed")
        if result.success and isinstance(value, str) and value[:1] in "{[":
            try:
                value = json.loads(value)
            except ValueError:
                pass
        entry: dict[str, Any] = {"tool_name": request.tool_name, "success": result.success, "result": value}
        if result.duration_ms is not None:
            entry["duration_ms"] = round(result.duration_ms)
        entries.append(entry)
    stamp = (now or datetime.now()).isoformat(timespec="seconds")
    event = {"type": "tool_result", "timestamp": stamp, "data": {"results": entries}}
    return json.dumps(event, ensure_ascii=False)


def render_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call as the model should write it (a `<function_calls>` block with one invoke)."""
    return render_calls([(name, arguments)])


def render_calls(calls: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """Several calls in one `<function_calls>` block, in order."""
    lines = ["<function_calls>"]
    for name, arguments in calls:
        lines.append(f'<invoke name="{name}">')
        for key, value in arguments.items():
            lines.append(f'<parameter name="{key}">{_render_value(value)}</parameter>')
        lines.append("</invoke>")
    lines.append("</function_calls>")
    return "\n".join(lines)


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        text: str = value
        if "<" not in text and _ENTITY.search(text):  # the parser would decode it
            text = text.replace("&", "&amp;")
        # The parser strips one newline at each end, so a value's own edge newline gets a spare.
        return ("\n" if text.startswith("\n") else "") + text + ("\n" if text.endswith("\n") else "")
    return json.dumps(value, ensure_ascii=False)


def _skip_ignored(text: str, opener: re.Match[str]) -> int:
    """Past the end of a think or results block; an unclosed one hides the rest of the reply."""
    tag = opener.group(0)[1:-1].strip().rpartition(":")[2].lower()
    closer = _IGNORED_CLOSE[tag].search(text, opener.end())
    return closer.end() if closer else len(text)


def _parse_block(text: str, pos: int, calls: list[ToolCallRequest]) -> int:
    """Read the invokes of one `<function_calls>` block; returns where scanning goes on."""
    while (found := _IN_BLOCK.search(text, pos)) is not None:
        if found.group("invoke"):
            pos = _parse_invoke(text, found, calls)
        elif found.group("close"):
            return found.end()
        else:  # the block was never closed and something else starts
            return found.start()
    if (cut := _cut_tag(text, pos, "invoke")) is not None:
        calls.append(
            ToolCallRequest(
                call_id="",
                tool_name=_name(cut.group(0)),
                protocol="xml",
                raw=text[cut.start() :],
                errors=["the reply ended inside the <invoke> tag"],
            )
        )
    return len(text)


def _parse_invoke(text: str, opener: re.Match[str], calls: list[ToolCallRequest]) -> int:
    name = _name(opener.group(0))
    arguments: dict[str, Any] = {}
    errors = [] if name else ["<invoke> has no name attribute"]
    pos = end = opener.end()
    while True:
        found = _IN_INVOKE.search(text, pos)
        if found is None:  # the reply ends after complete parameters: a call whose </invoke> is missing
            if _cut_tag(text, pos, "parameter") is not None:
                errors.append("the reply ended inside a <parameter> tag; write the whole call again")
            end = len(text)
            break
        if found.group("close"):
            end = found.end()
            break
        if found.group("other"):
            end = found.start()
            break
        key = _name(found.group(0))
        value, pos, complete = _read_value(text, found.end())
        if not complete:
            errors.append(f"the reply ended inside parameter {key!r}; write the whole call again")
            end = len(text)
            break
        if not key:
            errors.append("a <parameter> has no name attribute")
        elif key in arguments and arguments[key] != value:
            errors.append(f"parameter {key!r} is given twice with different values")
        else:
            arguments[key] = value
    calls.append(
        ToolCallRequest(
            call_id="",
            tool_name=name,
            arguments=arguments,
            protocol="xml",
            raw=text[opener.start() : end].rstrip(),
            errors=errors,
        )
    )
    return end


def _read_value(text: str, start: int) -> tuple[str, int, bool]:
    """(value, where scanning goes on, whether the value was complete)."""
    stop = _VALUE_END.search(text, start)
    limit = stop.start() if stop else len(text)
    closers = list(_PARAM_CLOSE.finditer(text, start, limit))
    if closers:
        # A value may quote `</parameter>` (code): the real closer is the last one before the
        # next tag when only whitespace follows it; with other text after it, the first one.
        closer = closers[-1] if not text[closers[-1].end() : limit].strip() else closers[0]
        return _clean(text[start : closer.start()]), closer.end(), True
    if stop is not None:  # </parameter> missing: the next tag ends the value
        return _clean(text[start:limit]), limit, True
    return _clean(text[start:]), len(text), False


def _clean(value: str) -> str:
    value = value.replace("\r\n", "\n").removeprefix("\n").removesuffix("\n")
    if "&" in value and "<" not in value:
        # A model that escapes writes &lt; for every <; a raw < shows it did not, so leave & alone.
        value = _ENTITY.sub(lambda m: _ENTITIES[m.group(1)], value)
    return value


def _cut_tag(text: str, pos: int, tag: str) -> re.Match[str] | None:
    """The start of a `tag` tag (possibly cut mid-name) that the reply ends inside."""
    found = _CUT_TAG.search(text, pos)
    return found if found is not None and tag.startswith(found.group(1).lower()) else None


def _name(tag: str) -> str:
    """The name attribute of a tag."""
    found = _NAME_ATTR.search(tag)
    if found is None:
        return ""
    return next(g for g in found.groups() if g is not None).strip()
