"""Tests read vixio's log (loguru sinks): importing vixio leaves it disabled, as a library should."""

from loguru import logger

import vixio  # noqa: F401 - imported first: its import disables its log

logger.enable("vixio")
