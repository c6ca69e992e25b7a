"""Shared fixtures: vixio's log enabled (importing vixio leaves it disabled, as a library should), each
test in its own folder, scripted LLM and speech servers on loopback; and the rule that every test
module says what it costs (one category marker, declared in pyproject.toml)."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from loguru import logger

import vixio  # noqa: F401 - imported first: its import disables its log
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import ScriptedLLMServer
from vixio.testing.redis_server import RedisServer, missing

logger.enable("vixio")

# The categories of pyproject.toml's `markers`; `make test-fast` selects the first two.
CATEGORIES = ("unit", "integration", "process", "models", "browser")


def _category_problem(module: pytest.Module) -> str | None:
    marks = getattr(module.obj, "pytestmark", [])
    names = [mark.name for mark in (marks if isinstance(marks, list) else [marks])]
    found = [name for name in names if name in CATEGORIES]
    if len(found) == 1:
        return None
    return (
        f"{module.nodeid}: a test module declares exactly one category at module level, e.g. "
        f"`pytestmark = pytest.mark.unit` (or a list holding one); it has "
        f"{found or 'none'}. The categories ({', '.join(CATEGORIES)}) are defined under `markers` "
        "in pyproject.toml: take the most expensive thing the module does."
    )


# The order tests are handed to xdist's workers: the expensive categories first, so the minutes-long
# tests start while the short ones are still queued to fill the gaps; last in line is then a
# unit test of milliseconds, not a fleet of `vixio serve` processes one worker runs alone.
_FIRST = {"browser": 0, "process": 0, "models": 1, "integration": 2, "unit": 3}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        marks = [mark.name for mark in item.iter_markers() if mark.name in _FIRST]
        return _FIRST[marks[0]] if marks else 3

    items.sort(key=rank)  # stable: within a category, the modules keep their order


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    """A module without its category fails collection (pytest then runs nothing), so `make test-fast`
    can never silently skip a test nobody categorised."""
    report = yield
    if isinstance(collector, pytest.Module) and report.passed:
        problem = _category_problem(collector)
        if problem:
            report.outcome = "failed"
            report.longrepr = problem
            report.result = []
    return report


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
