"""`vixio serve` raises its soft open-file limit to the hard one: a worker holding thousands of
silent devices needs a descriptor each, and services often start with a soft limit of 1,024."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vixio.fleet.plan import SPARE_DESCRIPTORS, raise_open_file_limit
from vixio.testing.serve import OTA_LINE, serve_config

pytestmark = pytest.mark.process


def _soft_open_files(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-file limit for {pid}")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_serve_and_its_workers_run_with_the_hard_open_file_limit(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    config = tmp_path / "config.yaml"
    config.write_text(serve_config(), encoding="utf-8")
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "vixio", "serve", "--config", str(config), "--workers", "2"],
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard)),
        )
    try:
        deadline = time.monotonic() + 120
        while not OTA_LINE.search(log.read_text(errors="replace")):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        workers = _children(process.pid)
        assert len(workers) >= 2
        assert [_soft_open_files(pid) for pid in [process.pid, *workers]] == [hard] * (1 + len(workers))
        assert "max_connections" not in log.read_text(errors="replace")  # 1,000 per worker fits
    finally:
        process.terminate()
        process.wait(30)


def test_a_max_connections_past_the_hard_limit_is_one_warning_naming_the_key() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    warning = raise_open_file_limit(hard)
    assert warning is not None and "xiaozhi.max_connections" in warning and f"only {hard} files" in warning
    assert raise_open_file_limit(hard - SPARE_DESCRIPTORS) is None
