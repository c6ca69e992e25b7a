"""A TTSStation that must resample without soxr (the `xiaozhi` extra) fails at start with an error
naming the extra, and says so on stderr even with the library's log off (issue 46: the pipeline
produced no audio and logged nothing)."""

from __future__ import annotations

import sys

import pytest
from loguru import logger

from vixio.core import audio
from vixio.core.chunk import StreamCompleteChunk, TextChunk
from vixio.stations import TTSStation
from vixio.testing.harness import run_station

from .fakes import ToneTTS

pytestmark = pytest.mark.unit


@pytest.fixture
def without_soxr(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "soxr", None)  # `import soxr` raises ImportError
    audio._soxr.cache_clear()
    yield
    audio._soxr.cache_clear()


async def test_resampling_without_soxr_is_an_error_naming_the_extra(
    without_soxr: None, capsys: pytest.CaptureFixture[str]
) -> None:
    tts = ToneTTS()
    assert tts.sample_rate != 24000
    logger.disable("vixio")  # as a library's user has it unless they turn it on
    try:
        with pytest.raises(ImportError, match=r"vixio\[xiaozhi\]"):
            await run_station(
                TTSStation(tts, output_sample_rate=24000),
                [TextChunk(text="Hello there.", role="assistant"), StreamCompleteChunk()],
            )
    finally:
        logger.enable("vixio")
    assert "xiaozhi" in capsys.readouterr().err  # the library's log is off by default


async def test_no_resampling_needs_no_soxr(without_soxr: None) -> None:
    tts = ToneTTS()
    out = await run_station(
        TTSStation(tts, output_sample_rate=tts.sample_rate),
        [TextChunk(text="Hello there.", role="assistant"), StreamCompleteChunk()],
    )
    assert any(getattr(chunk, "pcm", b"") for chunk in out)
