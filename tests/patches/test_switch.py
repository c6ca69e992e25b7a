"""`VIXIO_NO_PATCHES=1` installs no patch, and a version outside a patch's checked list leaves the
library alone with one log line."""

from __future__ import annotations

import sys

import pytest
from loguru import logger
from websockets.asyncio.server import ServerConnection

import vixio.patches as patches
from vixio.patches import aiohttp as aiohttp_patch
from vixio.patches import httpcore, llama_cpp, openai_agents, openai_sdk
from vixio.patches import websockets as ws_patch

pytestmark = pytest.mark.unit


@pytest.fixture
def log_lines():
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)


@pytest.fixture
def switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(patches.SWITCH, "1")
    monkeypatch.setattr(patches, "_refused", set())


@pytest.mark.parametrize("value, on", [("", True), ("0", True), ("false", True), ("1", False), ("yes", False)])
def test_the_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    monkeypatch.setenv(patches.SWITCH, value)
    assert patches.enabled() is on


def test_switched_off_no_module_installs_and_one_line_says_so(
    switched_off: None, log_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws_patch, "_batching", None)
    assert openai_agents.install() is False
    assert openai_sdk.install() is False
    assert httpcore.install() is False
    assert aiohttp_patch.install() is (sys.version_info >= (3, 12))  # 3.12+ needs no patch
    assert ws_patch.connection_class() is ServerConnection
    assert ws_patch.batching_available(object()) is False  # type: ignore[arg-type]
    assert openai_agents.install() is False  # again: no second line
    assert [line for line in log_lines if patches.SWITCH in line] == [
        "VIXIO_NO_PATCHES is set: no library is patched (vixio/patches/)"
    ]
    assert not [line for line in log_lines if "lacks" in line]


def test_switched_off_install_changes_nothing(switched_off: None) -> None:
    json_module = pytest.importorskip("agents.util._json")
    before = json_module._to_dump_compatible_internal
    openai_agents.install()
    assert json_module._to_dump_compatible_internal is before


def test_switched_off_llama_loads_with_amx_kernels(switched_off: None, monkeypatch: pytest.MonkeyPatch) -> None:
    library = pytest.importorskip("llama_cpp")
    import llama_cpp.llama_cpp as low_level

    monkeypatch.setattr(library, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 1 |")
    original = low_level.llama_model_default_params
    with llama_cpp.amx_kernels_disabled():
        assert low_level.llama_model_default_params is original


def test_an_unchecked_version_is_left_alone_with_one_line(
    monkeypatch: pytest.MonkeyPatch, log_lines: list[str]
) -> None:
    monkeypatch.delenv(patches.SWITCH, raising=False)
    monkeypatch.setattr(patches, "_refused", set())
    monkeypatch.setattr(patches, "installed_version", lambda distribution: "99.0.0")
    assert not patches.allowed("openai-agents", ("0.24.",), "something")
    assert not patches.allowed("openai-agents", ("0.24.",), "something")
    assert log_lines == [
        "openai-agents 99.0.0 is not a version vixio's patch was checked against (0.24.*): "
        "something left as the library does it"
    ]
    assert not patches.allowed("not-installed-anywhere", ("1.",), "x")  # absent: nothing to say
