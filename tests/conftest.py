"""Tests read vixio's log (loguru sinks): importing vixio leaves it disabled, as a library should."""

from loguru import logger

import vixio  # noqa: F401 - imported first: its import disables its log

logger.enable("vixio")


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    """Free SmolLM2 while llama_cpp is still importable (its `__del__` at interpreter exit
    prints a traceback otherwise)."""
    import sys

    module = sys.modules.get("vixio.providers.agent.local_llama")
    if module is not None:
        module.close_models()
