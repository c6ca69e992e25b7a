"""What `vixio serve` and `vixio config check` catch before any model loads."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vixio.cli import main
from vixio.config import preflight
from vixio.config.models import VixioConfig

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


def config(**data: object) -> VixioConfig:
    return VixioConfig.model_validate(data)


def test_run_time_failures_are_config_problems() -> None:
    problems = preflight.config_problems(
        config(
            asr={"provider": "faster-whisper", "model": "tiny.en", "language": "zh"},
            agent={"provider": "litellm", "model": "gpt-4o-mini"},
            xiaozhi={"port": 8123, "http": {"port": 8123}},
        )
    )
    assert len(problems) == 3
    assert problems[0].startswith("asr.model 'tiny.en' is English-only but asr.language is 'zh'")
    assert (
        problems[1].startswith("agent.model 'gpt-4o-mini' has no provider prefix")
        and "'openai/gpt-4o-mini'" in problems[1]
    )
    assert problems[2].startswith("xiaozhi.port and xiaozhi.http.port are both 8123")
    assert (
        preflight.config_problems(
            config(
                asr={"provider": "faster-whisper", "model": "base", "language": "zh"},
                agent={"provider": "litellm", "model": "openai/x"},
            )
        )
        == []
    )


def test_a_missing_extra_names_the_key_and_the_install_command_from_a_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = preflight._missing
    monkeypatch.setattr(preflight, "_missing", lambda module: module == "espeakng_loader" or real(module))
    problems = preflight.extra_problems(config(tts={"provider": "espeak"}))
    assert len(problems) == 1
    assert problems[0].startswith(
        "tts.provider 'espeak' needs the 'espeak' extra, which is not installed (espeakng_loader missing): "
    )
    assert problems[0].endswith(f"install -e '{ROOT}[espeak]'") or problems[0].endswith("install -e '.[espeak]'")
    monkeypatch.chdir(ROOT)
    if (ROOT / ".venv" / "bin" / "pip").exists():
        assert preflight.install_hint("espeak") == ".venv/bin/pip install -e '.[espeak]'"


def test_the_transport_needs_the_opus_module_its_codec_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's venv has opuslib_next (opuslib-next-bundled) and no opuslib (which only the test
    extra's xiaozhi-sdk brings): the preflight must accept that venv and refuse one without it."""
    real = preflight._missing
    monkeypatch.setattr(preflight, "_missing", lambda module: module == "opuslib" or real(module))
    assert preflight.extra_problems(config(asr=None, agent=None, tts=None)) == []
    monkeypatch.setattr(preflight, "_missing", lambda module: module == "opuslib_next" or real(module))
    (problem,) = preflight.extra_problems(config(asr=None, agent=None, tts=None))
    assert problem.startswith(
        "xiaozhi: the transport needs the 'xiaozhi' extra, which is not installed (opuslib_next missing): "
    )


def test_duplicate_yaml_keys_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("log:\n  level: info\nspeech:\n  apology: Sorry.\nlog:\n  level: debug\n")
    assert main(["config", "check", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "duplicate key 'log' (first at line 1" in err and "line 5" in err


def test_config_check_reports_run_time_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("log: {level: warning}\nagent: {provider: litellm, model: gpt-4o-mini}\n")
    assert main(["config", "check", "--config", str(path)]) == 1
    assert "agent.model 'gpt-4o-mini' has no provider prefix" in capsys.readouterr().err


def test_serve_defaults_to_config_yaml_and_refuses_a_port_in_use_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "config.yaml").write_text(
            f"xiaozhi: {{host: 127.0.0.1, port: {port}, http: {{host: 127.0.0.1, port: 0}}}}\n"
            "agent: null\ntts: null\nasr: null\n"
        )
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "vixio", "serve"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"vixio: xiaozhi.port {port} is already in use (another vixio, or another program?)"
    ]
    assert time.monotonic() - started < 30


def test_importing_vixio_prints_nothing() -> None:
    code = (
        "import vixio, vixio.app.server, vixio.voice.stack\n"
        "from vixio.core.pipeline import Pipeline\n"
        "from loguru import logger\n"
        "logger.bind().info('from the application')\n"
        "import vixio.providers.agent.openai_agents.provider\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].endswith("from the application"), lines  # the application's own log stays


def test_log_levels_are_case_insensitive() -> None:
    assert config(log={"level": "debug"}).log.level == "DEBUG"
    assert main(["--log-level", "warning", "config", "reference"]) == 0
