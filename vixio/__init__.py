"""vixio: an asyncio WebSocket voice-agent server for Xiaozhi ESP32 devices.

What a developer composing a pipeline needs is importable from here.
"""

import os

# litellm downloads a price list at import unless told not to; vixio runs offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from loguru import logger as _logger  # noqa: E402

# A library prints nothing unless asked: the CLI's setup_logging() (or `logger.enable("vixio")`)
# turns vixio's log on.
_logger.disable("vixio")

from vixio.core import *  # noqa: E402,F403
from vixio.core import __all__ as _core_all  # noqa: E402

__version__ = "0.1.0"
__all__ = [*_core_all, "__version__"]
