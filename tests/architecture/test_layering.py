"""The layering docs/architecture.md promises, checked on the import graph of `vixio/`.

Every package has a layer; a module imports only from its own package or from lower layers, so
nothing low knows anything high (the transport never learns of the console, the store never of a
transport). `if TYPE_CHECKING:` imports count too: a type-only edge is still a dependency a
reader must follow. Imports inside functions count: deferring an import hides an edge, it does
not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2] / "vixio"

# Low to high. Packages on one line share a layer and must not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("patches",),
    ("config",),
    ("metrics",),
    ("state",),
    ("providers", "transports"),
    ("stations", "memory"),
    ("profiles",),
    ("fleet",),
    ("voice",),
    ("console",),
    ("app",),
    ("serve",),
    ("testing",),
    ("cli",),
    ("__main__",),
]
LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}
# The package's own `__init__` (version) is importable from everywhere.
EVERYWHERE = {"vixio"}


def _package(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1].startswith("__") and parts[1] != "__main__":
        return "vixio"  # the package itself, or a name of its `__init__` (`__version__`)
    return parts[1]


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "vixio":  # `from vixio import metrics`: the names are modules
                found.update(f"vixio.{alias.name}" for alias in node.names)
            elif target.startswith("vixio."):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("vixio"))
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[module] = _imports(path, module)
    return graph


def test_every_package_has_a_layer():
    packages = {_package(module) for module in import_graph()} - EVERYWHERE
    assert packages <= set(LAYER), f"give these a layer in LAYERS: {sorted(packages - set(LAYER))}"


def test_no_module_imports_from_a_higher_layer_or_a_sibling_package():
    wrong = []
    for module, targets in import_graph().items():
        own = _package(module)
        if own in EVERYWHERE:
            continue
        for target in sorted(targets):
            other = _package(target)
            if other == own or other in EVERYWHERE:
                continue
            if LAYER.get(other, 99) >= LAYER.get(own, -1):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_providers_and_transports_never_import_each_other():
    graph = import_graph()
    crossing = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if {_package(m), _package(t)} == {"providers", "transports"}
    ]
    assert not crossing


def test_the_checker_sees_an_edge_against_the_layering(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from vixio.app.server import VixioServer\n")
    assert _imports(bad, "vixio.core.bad") == {"vixio.app.server"}
    assert LAYER[_package("vixio.app.server")] > LAYER[_package("vixio.core.bad")]
