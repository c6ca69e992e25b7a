from __future__ import annotations

import subprocess
import sys

import pytest

from vixio.cli import main

pytestmark = pytest.mark.process


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "config" in out and "--log-level" in out and "pairing" in out


def test_console_script_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "vixio", "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith("vixio ")


def test_unknown_log_level_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--log-level", "LOUD", "config", "reference"])
    assert "invalid choice" in capsys.readouterr().err
