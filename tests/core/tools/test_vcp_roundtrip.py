"""VCP round trip over the BFCL corpus: render every ground-truth call, corrupt the reply the
way models and transports do, parse it back, coerce with the function's schema, and check
BFCL's acceptable values. Irrelevance questions are negative controls."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable

import pytest

from vixio.core.tools.arguments import coerce_object, validation_errors
from vixio.core.tools.protocols.vcp import (
    REQUEST_END,
    REQUEST_START,
    VcpProtocol,
    field_value,
    render_call,
)
from vixio.testing import bfcl

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(bfcl.data_dir() is None, reason="BFCL corpus not found (set VIXIO_BFCL_DIR)"),
]

EXPECTED = {  # category: (cases, calls, cases BFCL rejects because the ground truth contradicts its schema)
    "simple_python": (400, 400, 1),
    "multiple": (200, 200, 0),
    "parallel": (200, 540, 0),
    "parallel_multiple": (200, 607, 0),
    "live_simple": (258, 258, 2),
    "live_multiple": (1053, 1053, 19),
}
NOISE = "Note: 「quoted」 {braces}, a <<< b >>> c, x:「始」not a call「末」 and [[brackets]]."
TRAILING = f"\nAlso, {REQUEST_START} is how I call tools and 「始」 opens a value"
UNCLOSED_THINK = f"\n<think>maybe {REQUEST_START}\ntool_name:「始」hidden「末」\n{REQUEST_END}"

Reply = Callable[[bfcl.BfclCase, list[str], random.Random], str]


def _arguments(call: bfcl.BfclCall) -> dict[str, object]:
    """The call's arguments as a model writes them in VCP: no null, so None is left out."""
    return {key: value for key, value in call.canonical_arguments().items() if value is not None}


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _contradicts_schema(case: bfcl.BfclCase) -> bool:
    """The ground truth breaks its own function's schema (`True` for a "string" parameter, an
    explicit null for a string, an empty list of acceptable values...). A text protocol coerces
    by the schema, so it cannot reproduce such a value; native JSON could."""
    return any(
        validation_errors(call.canonical_arguments(), case.schema(call.name))
        or any(values == [] for values in call.acceptable.values())
        for call in case.calls
    )


def _blocks(case: bfcl.BfclCase) -> list[str]:
    return [render_call(call.name, _arguments(call)) for call in case.calls]


def _prose(case: bfcl.BfclCase, blocks: list[str]) -> str:
    return f"You asked: {case.question}\nOn it.\n" + "\nNext:\n".join(blocks) + "\nDone."


def _batch(case: bfcl.BfclCase) -> str:
    fields = []
    for index, call in enumerate(case.calls, start=1):
        fields.append(f"tool_name{index}:{field_value(call.name)}")
        for key, value in _arguments(call).items():
            fields.append(f"{key}{index}:{field_value(_text(value))}")
    return "\n".join([REQUEST_START, *fields, REQUEST_END])


def _drift_case(word: str, rng: random.Random) -> str:
    return "".join(c.lower() if rng.random() < 0.5 else c for c in word)


def _fuzzy(text: str, rng: random.Random) -> str:
    """Marker drift as VCPToolBox's fuzzy matcher sees it: 2-4 brackets, any case, {} for 「」."""

    def block(match: re.Match[str]) -> str:
        return "<" * rng.randint(2, 4) + f"[{_drift_case(match.group(1), rng)}]" + ">" * rng.randint(2, 4)

    def field(match: re.Match[str]) -> str:
        return rng.choice("「{") + match.group(1) + rng.choice("」}")

    text = re.sub(r"<<<\[((?:END_)?TOOL_REQUEST)\]>>>", block, text)
    return re.sub(r"「([始末](?:ESCAPE)?)」", field, text)


def _fenced(blocks: list[str]) -> list[str]:
    return [f"```Tool\n{b}\n```" for b in blocks]


CORRUPTIONS: dict[str, tuple[Reply, bool]] = {  # name: (reply builder, fuzzy parser)
    "plain": (lambda case, blocks, rng: _prose(case, blocks), False),
    "crlf": (lambda case, blocks, rng: _prose(case, blocks).replace("\n", "\r\n"), False),
    "fenced": (lambda case, blocks, rng: _prose(case, _fenced(blocks)), False),
    "fuzzy": (lambda case, blocks, rng: _prose(case, [_fuzzy(b, rng) for b in blocks]), True),
    "noisy_prose": (lambda case, blocks, rng: NOISE + _prose(case, [b + "\n" + NOISE for b in blocks]), False),
    "trailing_unclosed": (lambda case, blocks, rng: _prose(case, blocks) + TRAILING + UNCLOSED_THINK, False),
    "batch": (lambda case, blocks, rng: _prose(case, [_batch(case)]), False),
    "everything": (
        lambda case, blocks, rng: (
            NOISE + _prose(case, _fenced([_fuzzy(b, rng) for b in blocks])) + TRAILING + UNCLOSED_THINK
        ).replace("\n", "\r\n"),
        True,
    ),
}


def _check(case: bfcl.BfclCase, reply: str, protocol: VcpProtocol) -> tuple[str | None, str | None]:
    """(what the parser got wrong, what BFCL rejects after coercion); None when all is right."""
    requests = protocol.parse(reply)
    got = [(r.tool_name, r.arguments, r.errors) for r in requests]
    sent = [(c.name, {k: _text(v) for k, v in _arguments(c).items()}, []) for c in case.calls]
    if got != sent:
        return f"parsed {got} != sent {sent}", None
    for request, call in zip(requests, case.calls, strict=True):
        arguments = coerce_object(request.arguments, case.schema(call.name))
        if not call.accepts(arguments):
            return None, f"{call.name}: {arguments} not in {call.acceptable}"
    return None, None


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_every_ground_truth_call_survives(category: str, corruption: str):
    """Every call parses back exactly as sent, in order; BFCL accepts every coerced call except
    where its ground truth contradicts the function's own schema (counted in EXPECTED)."""
    build, fuzzy = CORRUPTIONS[corruption]
    protocol = VcpProtocol(fuzzy=fuzzy)
    cases = list(bfcl.load(category))
    failures, rejected = [], []
    for case in cases:
        parse_problem, bfcl_problem = _check(case, build(case, _blocks(case), random.Random(case.id)), protocol)
        if parse_problem or (bfcl_problem and not _contradicts_schema(case)):
            failures.append(f"{case.id}: {parse_problem or bfcl_problem}")
        elif bfcl_problem:
            rejected.append(case.id)
    assert not failures, f"{len(failures)}/{len(cases)} failed, e.g.\n" + "\n".join(failures[:5])
    assert (len(cases), sum(len(c.calls) for c in cases), len(rejected)) == EXPECTED[category], rejected


def _irrelevance_questions() -> list[str]:
    base = bfcl.data_dir()
    assert base is not None
    with open(base / "BFCL_v4_irrelevance.json", encoding="utf-8") as handle:
        entries = [json.loads(line) for line in handle if line.strip()]
    return [" ".join(m["content"] for m in entry["question"][0] if m["role"] == "user") for entry in entries]


@pytest.mark.parametrize("fuzzy", [False, True])
def test_irrelevance_prose_without_blocks_has_no_calls(fuzzy: bool):
    questions = _irrelevance_questions()
    assert len(questions) == 240
    protocol = VcpProtocol(fuzzy=fuzzy)
    for question in questions:
        assert protocol.parse(f"I can't call a tool for that. {question}\n{NOISE}{TRAILING}") == [], question


def test_parse_speed():
    """Micro-benchmark: a typical reply (prose + 1-3 blocks) must parse far below a frame (60 ms)."""
    replies = []
    for category in ("simple_python", "parallel_multiple"):
        for case in bfcl.load(category, limit=100):
            replies.append(_prose(case, _blocks(case)))
    protocol = VcpProtocol()
    started = time.perf_counter()
    for _ in range(5):
        for reply in replies:
            protocol.parse(reply)
    per_reply = (time.perf_counter() - started) / (5 * len(replies))
    kilobytes = sum(len(r.encode()) for r in replies) / len(replies) / 1024
    print(
        f"\nVCP parse: {per_reply * 1e6:.0f} µs per reply ({kilobytes:.2f} KB), {per_reply / kilobytes * 1e6:.0f} µs/KB"
    )
    assert per_reply < 0.005
