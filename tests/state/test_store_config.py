"""`state:` in config.yaml: which backend `open_store` builds, and what a bad Redis URL says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vixio.config import ConfigError, parse_config
from vixio.state import open_store
from vixio.state.redis import RedisStore
from vixio.state.sqlite import SqliteStore

pytestmark = pytest.mark.process


def test_the_backend_key_picks_the_store_and_its_settings(tmp_path: Path) -> None:
    config = parse_config({"state": {"path": str(tmp_path / "s.db")}}, environ={})
    assert isinstance(open_store(config.state), SqliteStore)
    config = parse_config(
        {
            "state": {"backend": "redis", "url": "redis://:pw@10.0.0.5:6380/2", "prefix": "fleet-a:"},
            "memory": {"history_days": 7},
        },
        environ={},
    )
    store = open_store(config.state, config.memory)
    assert isinstance(store, RedisStore)
    assert (store.location, store.prefix, store._history_ms) == (
        "redis://:***@10.0.0.5:6380/2",
        "fleet-a:",
        7 * 86400_000,
    )


def test_the_password_comes_from_the_environment() -> None:
    config = parse_config(
        {"state": {"backend": "redis", "password": "${REDIS_PASSWORD}"}}, environ={"REDIS_PASSWORD": "s3cret"}
    )
    assert config.state.password == "s3cret"


def test_a_url_that_is_not_redis_is_named() -> None:
    with pytest.raises(ConfigError, match=r"state.url: expected redis://\[:password@\]host:port/db, rediss://"):
        parse_config({"state": {"backend": "redis", "url": "http://redis:6379"}}, environ={})


def test_without_the_redis_extra_serve_names_it(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("state: {backend: redis}\n", encoding="utf-8")
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "from vixio.cli import main; sys.exit(main(['config', 'check', '--config', sys.argv[1]]))"
    )
    result = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "state.backend 'redis' needs the 'redis' extra, which is not installed (redis missing)" in result.stderr
    assert "[redis]" in result.stderr


def test_a_redis_fleet_without_its_secret_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vixio.cli import main
    from vixio.config.memory import FLEET_SECRET_MISSING

    config = tmp_path / "config.yaml"
    config.write_text("state: {backend: redis, url: 'redis://127.0.0.1:1/0'}\n", encoding="utf-8")
    assert main(["config", "check", "--config", str(config)]) == 1
    assert "state.fleet_secret is not set" in capsys.readouterr().err
    # `vixio serve` stops on it before loading a model or reaching Redis.
    result = subprocess.run(
        [sys.executable, "-m", "vixio", "serve", "--config", str(config)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and f"vixio: {FLEET_SECRET_MISSING}" in result.stderr.splitlines(), result.stderr
    # From the environment, as the deploy files do; a short one is named with its length.
    secret = parse_config(
        {"state": {"backend": "redis", "fleet_secret": "${VIXIO_FLEET_SECRET}"}},
        environ={"VIXIO_FLEET_SECRET": "x" * 32},
    )
    assert secret.state.fleet_secret == "x" * 32
    with pytest.raises(ConfigError, match=r"state.fleet_secret: .*16 to 512 characters .*got 6"):
        parse_config({"state": {"backend": "redis", "fleet_secret": "short!"}}, environ={})
    config.write_text(
        "state: {backend: redis, url: 'redis://127.0.0.1:1/0', fleet_secret: '0123456789abcdef0123'}\n",
        encoding="utf-8",
    )
    assert main(["config", "check", "--config", str(config)]) == 0


def test_a_redis_without_a_password_is_named_once() -> None:
    from vixio.state.redis_link import unprotected

    warning = unprotected("redis://redis:6379/0", None)
    assert warning is not None and "has no password" in warning and "state.password" in warning
    assert unprotected("redis://redis:6379/0", "") is not None  # `${REDIS_PASSWORD:-}` unset
    assert unprotected("redis://:pw@redis:6379/0", None) is None
    assert unprotected("rediss://vixio:pw@redis:6380/0", None) is None
    assert unprotected("redis://redis:6379/0", "pw") is None
