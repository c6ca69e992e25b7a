"""Shared fixtures: vixio's log enabled (importing vixio leaves it disabled, as a library should), each
test in its own folder, scripted LLM and speech servers on loopback."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from loguru import logger

import vixio  # noqa: F401 - imported first: its import disables its log
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import ScriptedLLMServer

logger.enable("vixio")


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test (and each server it spawns) runs in its own folder, so the state store's default
    file (`state.path: .vixio/state.db`) is the test's own: no conversation or activation leaks
    from one test or run into the next, and nothing is written into the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLLMServer]:
    """A scripted OpenAI-compatible LLM server on loopback (tests `expect` its replies)."""
    async with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
async def speech() -> AsyncIterator[SpeechFaultServer]:
    """An OpenAI-compatible ASR/TTS server on loopback with fault modes."""
    async with SpeechFaultServer() as server:
        yield server


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    """Free SmolLM2 while llama_cpp is still importable (its `__del__` at interpreter exit
    prints a traceback otherwise)."""
    import sys

    module = sys.modules.get("vixio.providers.agent.local_llama")
    if module is not None:
        module.close_models()
