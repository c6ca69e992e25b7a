"""`vixio serve` with a state file it cannot use: one line naming the file and what to do, exit 1,
before any model loads or worker starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vixio.serve.supervisor import reuse_port_supported


def serve(tmp_path: Path, workers: str) -> subprocess.CompletedProcess[str]:
    state = tmp_path / "state.db"
    state.write_bytes(b"not a database" * 500)
    config = tmp_path / "config.yaml"
    config.write_text(f"""
xiaozhi: {{host: 127.0.0.1, port: 0, http: {{host: 127.0.0.1, port: 0}}}}
state: {{path: {state}}}
""", encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "vixio", "serve", "--config", str(config), "--workers", workers],
                          capture_output=True, text=True, timeout=120)


def test_one_process_refuses_a_damaged_state_file(tmp_path: Path) -> None:
    result = serve(tmp_path, "1")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "state.path" in line]
    assert lines == [f"vixio: state.path {tmp_path / 'state.db'}: not a usable vixio state file (file is not a "
                     "database); stop vixio and move the file aside (a new empty one is made at the next start) "
                     "or restore it from a backup"]
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")
def test_the_supervisor_refuses_it_before_starting_workers(tmp_path: Path) -> None:
    result = serve(tmp_path, "2")
    assert result.returncode == 1
    assert "cannot serve: state.path" in result.stderr and "not a usable vixio state file" in result.stderr
    assert "starting 2 workers" not in result.stderr and "Traceback" not in result.stderr
