"""`make install-config` (the install half of `make serve`) with a config that has a typo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.process, pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose python records each pip call (installing nothing) and whose vixio is this checkout's."""
    venv, calls = tmp_path / "venv", tmp_path / "pip-calls"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    vixio = venv / "bin" / "vixio"
    vixio.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m vixio "$@"\n')
    for script in (python, vixio):
        script.chmod(0o755)
    return venv, calls


def make_install_config(venv: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "MAKEFLAGS"}
    return subprocess.run(
        ["make", "--no-print-directory", "install-config", f"VENV={venv}", f"CONFIG={config}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_config_typo_stops_after_its_one_line_error(tmp_path: Path) -> None:
    venv, calls = fake_venv(tmp_path)
    config = tmp_path / "typo.yaml"
    config.write_text("tts: {provider: pipr}\n")
    result = make_install_config(venv, config)
    assert result.returncode != 0
    assert "tts" in result.stderr and "pipr" in result.stderr
    assert "is not a valid editable requirement" not in result.stdout + result.stderr
    assert calls.read_text().splitlines() == ["-m pip install -c constraints.txt -e ."]  # the core only, never ".[]"
    assert not list(venv.glob(".installed-config-*"))


def test_a_good_config_installs_the_core_then_its_extras(tmp_path: Path) -> None:
    venv, calls = fake_venv(tmp_path)
    config = tmp_path / "espeak.yaml"
    config.write_text("asr: null\nagent: null\ntts: {provider: espeak}\n")
    result = make_install_config(venv, config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls.read_text().splitlines() == [
        "-m pip install -c constraints.txt -e .",
        "-m pip install -c constraints.txt -e .[xiaozhi,espeak]",
    ]
