"""The rule tests/conftest.py holds at collection: a test module declares exactly one category
(pyproject.toml's `markers`), so `make test-fast` selects by cost and never drops an uncategorised
module silently."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import CATEGORIES, _category_problem

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _module(pytestmark: object = None) -> SimpleNamespace:
    obj = SimpleNamespace() if pytestmark is None else SimpleNamespace(pytestmark=pytestmark)
    return SimpleNamespace(obj=obj, nodeid="tests/x/test_y.py")


def test_one_category_passes_alone_or_in_a_list() -> None:
    assert _category_problem(_module(pytest.mark.unit)) is None  # type: ignore[arg-type]
    skip = pytest.mark.skipif(False, reason="never")
    assert _category_problem(_module([skip, pytest.mark.process])) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "marks", [None, [], [pytest.mark.skipif(False, reason="x")], [pytest.mark.unit, pytest.mark.integration]]
)
def test_none_or_two_categories_are_refused_naming_the_module(marks: object) -> None:
    problem = _category_problem(_module(marks))  # type: ignore[arg-type]
    assert problem is not None and problem.startswith("tests/x/test_y.py:")
    assert "pytestmark = pytest.mark.unit" in problem


def test_the_categories_are_the_markers_pyproject_declares() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = [line.split(":")[0] for line in options["markers"]]
    assert declared == list(CATEGORIES)
    assert "--strict-markers" in options["addopts"]
