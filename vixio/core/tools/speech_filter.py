"""SpeechFilter: keeps tool markup, results, code and thinking out of TTS while a reply streams.

A text tool protocol puts its calls in the reply itself, and TTS must never read them — not even
their first characters (xiaozhi-esp32-server spoke a leading `<tool` before it noticed the
call). The filter sits between the LLM stream and the sentence splitter:

- outside markup it releases every character up to the earliest complete start marker, and holds
  back only the longest tail that could still grow into one (`Hi <func` holds `<func`); a tail
  that cannot becomes speech at the next delta, or at `flush()`;
- inside markup it drops everything up to the rule's end marker, then speaks again; thinking
  (`<think>`) is released as `thought` instead, for display;
- a reply that ends inside markup drops the rest: unclosed markup protects to the end.

Markers are spelled with `Atom`s (a character class repeated min..max times) so one rule covers
namespace prefixes (`<minimax:function_calls>`) and the marker drift VCP models show (two to four
angle brackets, any case). Matching is case-insensitive. The filter does not parse calls: the
protocol parses the finished reply, and `markup_seen` says whether that is worth doing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

Atom = tuple[str, int, int]
"""A regex character-class body (`<`, `A-Za-z_`) that occurs min..max times."""
Spelling = tuple[Atom, ...]
"""One way a marker is written."""

_NAME_START, _NAME_REST = "A-Za-z_", r"A-Za-z0-9_.\-"


@dataclass(frozen=True, slots=True)
class MarkupRule:
    """One kind of block that must not be spoken."""

    name: str
    starts: tuple[Spelling, ...]
    ends: tuple[Spelling, ...]
    thought: bool = False
    """The content is the model's thinking: released as `thought` rather than dropped."""


def literal(text: str) -> Spelling:
    return tuple((re.escape(char), 1, 1) for char in text)


def tag(name: str) -> tuple[Spelling, Spelling]:
    """`<name>` and `<ns:name>` (`name` may start with `/` for the closing tag)."""
    slash = literal("/") if name.startswith("/") else ()
    local = literal(name.lstrip("/") + ">")
    prefix: Spelling = ((_NAME_START, 1, 1), (_NAME_REST, 0, 31), (":", 1, 1))
    return literal("<") + slash + local, literal("<") + slash + prefix + local


def vcp_marker(name: str) -> Spelling:
    """`<<<[NAME]>>>` with two to four brackets each side (VCPToolBox's fuzzy marker matching)."""
    return (("<", 2, 4),) + literal(f"[{name}]") + ((">", 2, 4),)


DEFAULT_RULES: tuple[MarkupRule, ...] = (
    MarkupRule(
        "think",
        starts=(literal("<think>"), literal("<thinking>")),
        ends=(literal("</think>"), literal("</thinking>")),
        thought=True,
    ),
    MarkupRule("function_calls", starts=tag("function_calls"), ends=tag("/function_calls")),
    MarkupRule("tool_call", starts=tag("tool_call"), ends=tag("/tool_call")),
    MarkupRule("function_results", starts=tag("function_results"), ends=tag("/function_results")),
    *(
        MarkupRule(f"vcp_{name.lower()}", starts=(vcp_marker(name),), ends=(vcp_marker(f"END_{name}"),))
        for name in ("TOOL_REQUEST", "TOOL_REQUEST_ESCAPE", "TOOL_RESULT", "TOOL_DEFINITION")
    ),
    MarkupRule(
        "vcp_summary",
        starts=(literal("[[VCP调用结果信息汇总") + ((":：", 1, 1),),),
        ends=(literal("VCP调用结果结束]]"),),
    ),
    MarkupRule(
        "aio_summary",
        starts=(literal("[[AIO工具调用结果信息汇总") + ((":：", 1, 1),),),
        ends=(literal("AIO工具调用结果结束]]"),),
    ),
    # A fence closes with at least as many backticks as it opened with (CommonMark), so a ````
    # block may quote ``` fences; listed first, it wins where both could start.
    MarkupRule("long_code_fence", starts=((("`", 4, 16),),), ends=((("`", 4, 16),),)),
    MarkupRule("code_fence", starts=(literal("```"),), ends=((("`", 3, 16),),)),
)
"""XML calls and results (`<function_calls>`, `<tool_call>`, `<function_results>`, each also with
a namespace prefix), thinking, VCP request/escape/result/definition blocks (fuzzy brackets),
VCPToolBox's and AIO Hub's result summaries, and ``` code fences."""


@dataclass(frozen=True, slots=True)
class FilterOutput:
    """What one delta (or the flush) released."""

    speech: str = ""
    """Text safe to speak now."""
    thought: str = ""
    """Thinking text, for display only."""


class _Markers:
    """Finds complete markers of a set, and where a tail could still become one."""

    def __init__(self, spellings: Sequence[tuple[Spelling, int]]) -> None:
        full = [f"(?P<m{i}>{''.join(_atom(a) for a in spelling)})" for i, (spelling, _) in enumerate(spellings)]
        self.search = re.compile("|".join(full), re.IGNORECASE).search
        self.prefix = re.compile("|".join(_prefix(spelling) for spelling, _ in spellings), re.IGNORECASE).fullmatch
        self.trigger = re.compile("|".join(sorted({f"[{s[0][0]}]" for s, _ in spellings})), re.IGNORECASE).search
        self.longest = max(sum(atom[2] for atom in spelling) for spelling, _ in spellings)
        self.rule = {f"m{i}": rule for i, (_, rule) in enumerate(spellings)}

    def held_from(self, text: str, pos: int) -> int:
        """Where the longest tail of `text[pos:]` that could still become a marker starts."""
        found = self.trigger(text, max(pos, len(text) - self.longest))
        while found is not None:
            if self.prefix(text, found.start()):
                return found.start()
            found = self.trigger(text, found.start() + 1)
        return len(text)


class SpeechFilter:
    """Splits one streamed reply into speech and thought, dropping markup (one filter per reply,
    or `reset()` between replies)."""

    def __init__(self, rules: Sequence[MarkupRule] = DEFAULT_RULES) -> None:
        self.rules = tuple(rules)
        self._start, self._ends = _compile(self.rules)
        self.markup_seen = False
        """A block other than thinking was in this reply: the protocol parser has work to do."""
        self._buffer = ""
        self._inside: int | None = None

    def feed(self, delta: str) -> FilterOutput:
        self._buffer += delta
        return self._release(final=False)

    def flush(self) -> FilterOutput:
        """The end of the reply: held text is spoken, unclosed markup dropped. `markup_seen` stays
        readable until `reset()`."""
        out = self._release(final=True)
        self._buffer, self._inside = "", None
        return out

    def reset(self) -> None:
        """Forget the reply (an interruption, or the next reply)."""
        self._buffer, self._inside, self.markup_seen = "", None, False

    def _release(self, final: bool) -> FilterOutput:
        buffer, pos = self._buffer, 0
        speech: list[str] = []
        thought: list[str] = []
        while True:
            markers = self._start if self._inside is None else self._ends[self._inside]
            sink = speech if self._inside is None else thought if self.rules[self._inside].thought else None
            found = markers.search(buffer, pos)
            # A marker that reaches the end of the buffer may still grow (`>>` into `>>>`, ``` into
            # ````), so it counts once a character follows it or the reply ends.
            if found is not None and (final or found.end() < len(buffer)):
                if sink is not None:
                    sink.append(buffer[pos : found.start()])
                if self._inside is None:
                    self._inside = markers.rule[found.lastgroup or ""]  # every alternative is a named group
                    self.markup_seen = self.markup_seen or not self.rules[self._inside].thought
                else:
                    self._inside = None
                pos = found.end()
                continue
            held = len(buffer) if final else found.start() if found is not None else markers.held_from(buffer, pos)
            if sink is not None:
                sink.append(buffer[pos:held])
            self._buffer = buffer[held:]
            return FilterOutput("".join(speech), "".join(thought))


@functools.lru_cache(maxsize=8)
def _compile(rules: tuple[MarkupRule, ...]) -> tuple[_Markers, tuple[_Markers, ...]]:
    """The start markers of all rules, and each rule's end markers (built once per rule set: a
    filter is made per reply)."""
    start = _Markers([(spelling, i) for i, rule in enumerate(rules) for spelling in rule.starts])
    return start, tuple(_Markers([(spelling, i) for spelling in rule.ends]) for i, rule in enumerate(rules))


def _atom(atom: Atom) -> str:
    chars, low, high = atom
    return f"[{chars}]" if low == high == 1 else f"[{chars}]{{{low},{high}}}"


def _prefix(spelling: Spelling) -> str:
    """A regex for every prefix of the spelling, the whole spelling included."""
    pattern = ""
    for chars, low, high in reversed(spelling):
        short = f"[{chars}]{{0,{low - 1}}}" if low > 1 else ""
        pattern = f"(?:{short}|[{chars}]{{{low},{high}}}{pattern})"
    return pattern
