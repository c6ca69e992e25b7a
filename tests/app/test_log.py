from __future__ import annotations

import io

import pytest
from loguru import logger

from vixio.app import log

pytestmark = pytest.mark.unit


def test_one_line_per_event_with_session_and_device(monkeypatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(log.sys, "stderr", buffer)
    log.setup_logging("INFO")
    bound = logger.bind(session="sess-1", device="aa:bb:cc:dd:ee:ff")
    bound.debug("hidden")
    bound.info("hello answered")
    try:
        raise ValueError("bad frame")
    except ValueError:
        bound.exception("decode failed")
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2
    assert "sess-1" in lines[0] and "aa:bb:cc:dd:ee:ff" in lines[0] and "hello answered" in lines[0]
    assert lines[1].endswith("decode failed [ValueError: bad frame]")
    log.setup_logging("WARNING")
