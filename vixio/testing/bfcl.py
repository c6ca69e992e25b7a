"""The BFCL function-calling corpus in ../shared/data/bfcl (JSON Lines) as Python records.

Each case pairs the functions offered with the ground-truth calls; `schema()` maps BFCL's
Python type names to JSON Schema so the same coercion code as for device tools applies.
Used by the text-protocol round-trip tests: render each call, corrupt it, parse it back.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vixio.core.tools.arguments import normalize_schema

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple")


def data_dir() -> Path | None:
    """Where the corpus is: $VIXIO_BFCL_DIR, ../shared/data/bfcl next to the checkout, or the
    data files of the `bfcl-eval` package (`make test` installs it without its dependencies)."""
    candidates = [os.environ.get("VIXIO_BFCL_DIR", "")]
    here = Path(__file__).resolve()
    candidates += [str(parent / "shared" / "data" / "bfcl") for parent in here.parents]
    spec = importlib.util.find_spec("bfcl_eval")  # locates the package without importing it
    if spec is not None and spec.origin:
        candidates.append(str(Path(spec.origin).parent / "data"))
    for candidate in candidates:
        if candidate and (Path(candidate) / "possible_answer").is_dir():
            return Path(candidate)
    return None


@dataclass(frozen=True, slots=True)
class BfclCall:
    name: str
    acceptable: dict[str, list[Any]]
    """Per parameter, the values that count as right; "" means the parameter may be omitted."""

    def canonical_arguments(self) -> dict[str, Any]:
        """One concrete argument set: the first acceptable value of each parameter that is given."""
        out: dict[str, Any] = {}
        for param, values in self.acceptable.items():
            given = [v for v in values if v != ""]
            if given:
                out[param] = given[0]
        return out

    def accepts(self, arguments: dict[str, Any]) -> bool:
        for param, values in self.acceptable.items():
            if param not in arguments:
                if "" not in values:
                    return False
                continue
            if not any(_same(arguments[param], v) for v in values):
                return False
        return set(arguments) <= set(self.acceptable)


@dataclass(frozen=True, slots=True)
class BfclCase:
    id: str
    question: str
    functions: list[dict[str, Any]]
    calls: list[BfclCall]

    def schema(self, name: str) -> dict[str, Any]:
        for function in self.functions:
            if function["name"] == name:
                return normalize_schema(function.get("parameters"))
        raise KeyError(name)


def load(category: str, limit: int | None = None) -> Iterator[BfclCase]:
    base = data_dir()
    if base is None:
        return
    answers = {}
    with open(base / "possible_answer" / f"BFCL_v4_{category}.json", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                entry = json.loads(line)
                answers[entry["id"]] = entry["ground_truth"]
    count = 0
    with open(base / f"BFCL_v4_{category}.json", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            entry = json.loads(line)
            truth = answers.get(entry["id"])
            if truth is None:
                continue
            calls = [BfclCall(name, params) for call in truth for name, params in call.items()]
            turns = entry.get("question") or [[]]
            question = " ".join(m.get("content", "") for m in turns[0] if m.get("role") == "user")
            yield BfclCase(entry["id"], question, entry["function"], calls)
            count += 1
            if limit is not None and count >= limit:
                return


def _same(value: Any, expected: Any) -> bool:
    if isinstance(expected, float) or isinstance(value, float):
        try:
            return abs(float(value) - float(expected)) < 1e-9
        except (TypeError, ValueError):
            return False
    if isinstance(expected, list) and isinstance(value, list | tuple):
        return len(value) == len(expected) and all(_same(a, b) for a, b in zip(value, expected, strict=True))
    if isinstance(expected, dict) and isinstance(value, dict):
        return value.keys() == expected.keys() and all(_same(value[k], expected[k]) for k in expected)
    return bool(value == expected and type(value) is not bool or value is expected)
