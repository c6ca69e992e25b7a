"""Tests read vixio's log (loguru sinks): importing vixio leaves it disabled, as a library should."""

from collections.abc import AsyncIterator

import pytest
from loguru import logger

import vixio  # noqa: F401 - imported first: its import disables its log
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import ScriptedLLMServer

logger.enable("vixio")


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
