"""Shared fixtures: vixio's log enabled (importing vixio leaves it disabled, as a library should), each
test in its own folder, scripted LLM and speech servers on loopback."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from loguru import logger

import vixio  # noqa: F401 - imported first: its import disables its log
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import ScriptedLLMServer
from vixio.testing.redis_server import RedisServer, missing

logger.enable("vixio")


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test (and each server it spawns) runs in its own folder, so the state store's default
    file (`state.path: .vixio/state.db`) is the test's own: no conversation or activation leaks
    from one test or run into the next, and nothing is written into the checkout."""
    monkeypatch.chdir(tmp_path)


def _next_handler_id() -> int:
    probe = logger.add(lambda _message: None)
    logger.remove(probe)
    return probe


@pytest.fixture(autouse=True)
def _log_sinks_end_with_their_test() -> Iterator[None]:
    """A sink a test adds (e.g. `vixio.app.log.setup_logging` on pytest's captured stderr, which is
    closed after the test) is removed with it: left behind, every later record would fail to
    write and print a traceback ("I/O operation on closed file"), slowing the tests after it."""
    first = _next_handler_id()
    yield
    for handler_id in range(first, _next_handler_id()):
        try:
            logger.remove(handler_id)
        except ValueError:  # the test removed it itself
            pass


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

    module = sys.modules.get("vixio.providers.agent.llama.weights")
    if module is not None:
        module.close_models()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A throwaway redis-server for one test (tests/state/ shares one per session); the test skips,
    naming the Debian package, when the binary is missing."""
    why = missing()
    if why:
        pytest.skip(why)
    server = RedisServer.start(tmp_path / "redis")
    try:
        yield server
    finally:
        server.close()
