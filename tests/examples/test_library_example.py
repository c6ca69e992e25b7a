"""examples/library_pipeline.py runs as docs/library.md and its docstring say (issue 46: the developer
path as written), and its agent provider, written from docs/providers.md, instantiates."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import shlex
import sys

import pytest

from tests.examples.test_examples import EXAMPLES, ROOT

pytestmark = pytest.mark.process


def test_the_documented_provider_methods_are_all_a_provider_needs() -> None:
    spec = importlib.util.spec_from_file_location("library_pipeline", EXAMPLES / "library_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.EchoAgent()  # "Can't instantiate abstract class" when the doc leaves a method out
    doc = (ROOT / "docs" / "providers.md").read_text(encoding="utf-8")
    writing = doc.split("## Writing a provider", 1)[1]
    for method in (
        "initialize",
        "chat",
        "update_tools",
        "cancel",
        "history",
        "record_interrupted_reply",
        "clear_history",
        "restore_history",
    ):
        assert f"`{method}`" in writing or f"streaming `{method}`" in writing, method


async def test_the_library_example_speaks_each_turn() -> None:
    docstring = (EXAMPLES / "library_pipeline.py").read_text(encoding="utf-8").split('"""')[1]
    line = next(line.strip() for line in docstring.splitlines() if line.strip().startswith("python examples/"))
    assert line in (ROOT / "docs" / "library.md").read_text(encoding="utf-8")  # the page shows the same command
    command = [sys.executable, *shlex.split(line)[1:]]
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    text = output.decode()
    assert process.returncode == 0, text
    assert "< You said: What can you do?" in text and "< That was turn 2." in text, text
    seconds = [float(value) for value in re.findall(r"\((\d+\.\d) s of audio\)", text)]
    assert len(seconds) == 4 and all(value > 0.5 for value in seconds), text
    assert "library.md" in (ROOT / "README.md").read_text(encoding="utf-8")
