"""How to install an optional extra: vixio is installed from its checkout, not from PyPI."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def install_hint(extra: str) -> str:
    """The pip command that installs `extra`, e.g. `.venv/bin/pip install -e '.[espeak]'`."""
    if not (_ROOT / "pyproject.toml").exists():  # an installed wheel, not a checkout
        return f"pip install 'vixio[{extra}]'"
    if Path.cwd().resolve() == _ROOT and (_ROOT / ".venv" / "bin" / "pip").exists():
        return f".venv/bin/pip install -e '.[{extra}]'"
    pip = Path(sys.executable).parent / "pip"
    return f"{pip if pip.exists() else 'pip'} install -e '{_ROOT}[{extra}]'"
