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


def test_the_backend_key_picks_the_store_and_its_settings(tmp_path: Path) -> None:
    config = parse_config({"state": {"path": str(tmp_path / "s.db")}}, environ={})
    assert isinstance(open_store(config.state), SqliteStore)
    config = parse_config({"state": {"backend": "redis", "url": "redis://:pw@10.0.0.5:6380/2", "prefix": "fleet-a:"},
                           "memory": {"history_days": 7}}, environ={})
    store = open_store(config.state, config.memory)
    assert isinstance(store, RedisStore)
    assert (store.location, store.prefix, store._history_ms) == ("redis://:***@10.0.0.5:6380/2", "fleet-a:", 7 * 86400_000)


def test_the_password_comes_from_the_environment() -> None:
    config = parse_config({"state": {"backend": "redis", "password": "${REDIS_PASSWORD}"}},
                          environ={"REDIS_PASSWORD": "s3cret"})
    assert config.state.password == "s3cret"


def test_a_url_that_is_not_redis_is_named() -> None:
    with pytest.raises(ConfigError, match=r"state.url: expected redis://\[:password@\]host:port/db, rediss://"):
        parse_config({"state": {"backend": "redis", "url": "http://redis:6379"}}, environ={})


def test_without_the_redis_extra_serve_names_it(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("state: {backend: redis}\n", encoding="utf-8")
    code = ("import sys; sys.modules['redis'] = None\n"
            "from vixio.cli import main; sys.exit(main(['config', 'check', '--config', sys.argv[1]]))")
    result = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "state.backend 'redis' needs the 'redis' extra, which is not installed (redis missing)" in result.stderr
    assert "[redis]" in result.stderr
