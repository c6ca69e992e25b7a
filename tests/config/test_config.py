from __future__ import annotations

from pathlib import Path

import pytest

from vixio.cli import main
from vixio.config import ConfigError, load_config, parse_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def errors_of(data: object, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, environ=environ or {})
    return info.value.errors


def test_wrong_type_names_key_value_and_expectation() -> None:
    (error,) = errors_of({"pipeline": {"queue_size": "lots"}})
    assert error.startswith("pipeline.queue_size:")
    assert "'lots'" in error and "integer" in error


def test_out_of_range_value() -> None:
    (error,) = errors_of({"pipeline": {"queue_size": 0}})
    assert error.startswith("pipeline.queue_size:") and "greater than or equal to 1" in error and "(got 0)" in error


def test_unknown_key_lists_allowed_keys() -> None:
    (error,) = errors_of({"log": {"levle": "DEBUG"}})
    assert error == "log.levle: unknown key; allowed keys here: level, tracebacks"


def test_bad_choice_lists_allowed_values() -> None:
    (error,) = errors_of({"log": {"level": "LOUD"}})
    assert error.startswith("log.level:") and "'DEBUG'" in error and "'LOUD'" in error


def test_every_error_is_reported_at_once() -> None:
    assert len(errors_of({"log": {"level": "LOUD", "x": 1}, "pipeline": {"queue_size": "y"}})) == 3


def test_missing_env_var_names_key_and_variable() -> None:
    (error,) = errors_of({"log": {"level": "${VIXIO_TEST_LEVEL}"}})
    assert error.startswith("log.level: environment variable VIXIO_TEST_LEVEL is not set")


def test_env_substitution_with_defaults_types_and_escapes() -> None:
    config = parse_config(
        {"log": {"level": "${LEVEL}"}, "pipeline": {"queue_size": "${QSIZE:-16}"}},
        environ={"LEVEL": "DEBUG"},
    )
    assert config.log.level == "DEBUG"
    assert config.pipeline.queue_size == 16  # whole-value reference keeps YAML typing

    from vixio.config.loader import substitute_env

    errors: list[str] = []
    assert substitute_env("a $${B} ${C}", {"C": "c"}, errors) == "a ${B} c" and not errors


def test_yaml_syntax_error_has_a_position(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("log:\n  level: [INFO\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert "invalid YAML at line" in info.value.errors[0]


def test_top_level_must_be_a_mapping() -> None:
    assert "mapping" in errors_of(["a", "b"])[0]


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty).pipeline.queue_size == 32


def test_shipped_config_is_valid() -> None:
    load_config(ROOT / "config.yaml")


def test_cli_config_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--config", str(ROOT / "config.yaml")]) == 0
    assert capsys.readouterr().out.startswith("OK")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline:\n  queue_size: many\nlog:\n  colour: red\n")
    assert main(["config", "check", "--config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "pipeline.queue_size" in err and "log.colour: unknown key" in err
    assert main(["config", "check", "--config", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read the file" in capsys.readouterr().err


def test_docs_config_md_matches_the_models() -> None:
    from vixio.config.reference import BEGIN, END, render_reference

    text = (ROOT / "docs" / "config.md").read_text()
    generated = text[text.index(BEGIN) : text.index(END) + len(END)] + "\n"
    assert generated == render_reference(), "docs/config.md is stale: run `make docs`"


def test_cli_config_check_refuses_a_short_admin_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    short = tmp_path / "short.yaml"
    short.write_text("xiaozhi:\n  http:\n    admin_token: x\n")
    assert main(["config", "check", "--config", str(short)]) == 1
    err = capsys.readouterr().err
    assert "xiaozhi.http.admin_token" in err and "at least 16" in err and "secrets.token_urlsafe(24)" in err
    good = tmp_path / "good.yaml"
    good.write_text("xiaozhi:\n  http:\n    admin_token: ${VIXIO_ADMIN_TOKEN}\n")
    assert main(["config", "check", "--config", str(good)]) == 1  # unset variable: named, not accepted empty
    assert load_config(good, environ={"VIXIO_ADMIN_TOKEN": "k" * 16}).xiaozhi.http.admin_token == "k" * 16
    assert parse_config({"xiaozhi": {"http": {"admin_token": ""}}}, environ={}).xiaozhi.http.admin_token == ""


def test_max_message_bytes_has_an_upper_bound() -> None:
    (error,) = errors_of({"xiaozhi": {"max_message_bytes": 10**12}})
    assert error.startswith("xiaozhi.max_message_bytes:") and "at most 16777216" in error
    assert parse_config({"xiaozhi": {"max_message_bytes": 16 * 1024 * 1024}}, environ={})
