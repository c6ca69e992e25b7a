"""The map a newcomer reads is true: docs/index.md names every page, and docs/architecture.md's
tree names every package of vixio/ and lists the layers test_layering.py enforces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.architecture.test_layering import LAYERS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_index_names_every_page() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([a-z0-9-]+\.md)\)", index))
    pages = {path.name for path in DOCS.glob("*.md")} - {"index.md"}
    assert pages - linked == set(), f"docs/index.md does not list {sorted(pages - linked)}"
    assert linked - pages == set(), f"docs/index.md links missing pages {sorted(linked - pages)}"


def _tree() -> str:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    start = text.index("```\nvixio/\n")
    return text[start : text.index("```", start + 3)]


def test_the_architecture_tree_names_every_package() -> None:
    tree = _tree()
    named = set(re.findall(r"[├└]── ([a-z_]+)/", tree))
    packages = {
        path.parent.relative_to(ROOT / "vixio").parts[-1]
        for path in (ROOT / "vixio").rglob("__init__.py")
        if path.parent != ROOT / "vixio"
    }
    missing = packages - named
    assert not missing, f"docs/architecture.md's tree does not show {sorted(missing)}"


def test_the_architecture_page_lists_the_enforced_layers() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", text, re.MULTILINE)
    documented = [tuple(sorted(re.findall(r"`([a-z_]+)`", packages))) for _, packages in rows]
    enforced = [tuple(sorted(layer)) for layer in LAYERS]
    # The doc shows `cli` and `__main__` on one line (the command and its `python -m` twin).
    enforced = enforced[:-2] + [tuple(sorted(enforced[-2] + enforced[-1]))]
    assert documented == enforced
