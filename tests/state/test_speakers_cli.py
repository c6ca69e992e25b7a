"""`vixio speakers list|enrol|delete` on a real SQLite store, with recordings written here as WAV
and OGG and an owner's encoder file (a small ONNX model made in the test)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("soxr")

import soundfile  # noqa: E402

from vixio.cli import main  # noqa: E402
from vixio.providers.speaker import encoder as enc  # noqa: E402
from vixio.state.sqlite import SqliteStore  # noqa: E402

from ..providers.speaker.test_encoder_small_model import DIM, small_state  # noqa: E402

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:ff"


async def _main(argv: list[str]) -> int:
    return await asyncio.to_thread(main, argv)  # the command runs its own event loop


async def test_enrol_from_files_then_list_then_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "owner.onnx"
    model.write_bytes(enc._graph(small_state()))
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"state": {"path": str(tmp_path / "state.db")}, "speakers": {"enabled": True, "model": str(model)}}),
        encoding="utf-8",
    )
    rng = np.random.default_rng(4)
    wav, ogg, short = tmp_path / "a.wav", tmp_path / "b.ogg", tmp_path / "short.wav"
    soundfile.write(wav, rng.normal(0, 0.1, 32000).astype(np.float32), 16000)
    soundfile.write(ogg, rng.normal(0, 0.1, 2 * 44100).astype(np.float32), 44100)  # resampled to 16 kHz
    soundfile.write(short, rng.normal(0, 0.1, 4000).astype(np.float32), 16000)

    common = ["--config", str(config)]
    assert await _main(["speakers", "enrol", DEVICE.upper(), "Alice", str(wav), str(ogg), *common]) == 0
    assert "voiceprint of Alice now from 2 recording(s)" in capsys.readouterr().out
    assert await _main(["speakers", "enrol", DEVICE, "Bob", str(short), *common]) == 1
    assert "too short" in capsys.readouterr().err
    assert await _main(["speakers", "list", *common, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(p["device"], p["person"], p["samples"]) for p in listed] == [(DEVICE, "Alice", 2)]

    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    try:
        (stored,) = await store.voiceprints(DEVICE)
        assert stored.array().shape == (DIM,) and abs(float(np.linalg.norm(stored.array())) - 1) < 1e-5
    finally:
        await store.close()

    assert await _main(["speakers", "delete", DEVICE, "Alice", *common]) == 0
    assert await _main(["speakers", "delete", DEVICE, "Alice", *common]) == 2
    assert await _main(["speakers", "list", DEVICE, *common]) == 0
    assert "no voiceprints" in capsys.readouterr().out
